//! `sluice`: demo server, simulator and benchmark.
fn main() {
    println!("sluice: subcommands serve, simulate and bench are being built");
}
