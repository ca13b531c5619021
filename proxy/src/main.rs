//! `sluice-proxy`: the proxy alone, for a server (the same as `sluice proxy`).

use clap::Parser;

/// Forward an API's routes with the proxy's own credential, within the API's budget shared by
/// every instance (through Redis).
#[derive(Parser)]
#[command(name = "sluice-proxy", version)]
struct Cli {
    #[command(flatten)]
    args: sluice_proxy::ProxyArgs,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    if let Err(e) = sluice_proxy::run(cli.args).await {
        eprintln!("sluice-proxy: {e}");
        std::process::exit(1);
    }
}
