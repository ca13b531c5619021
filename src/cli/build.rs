//! `sluice build`: writes the package an app installs.

use std::path::PathBuf;

use clap::Args;
use sluice::package::Package;

use super::MainError;

#[derive(Args, Clone)]
pub(crate) struct BuildArgs {
    /// The folder to write (created if needed; the worker wasm of an older build there is
    /// removed, other files are left alone).
    #[arg(long, default_value = "target/sluice-package")]
    out: PathBuf,
}

pub(crate) fn build(args: BuildArgs) -> Result<(), MainError> {
    let package = Package::embedded().map_err(|e| MainError::Package(e.to_string()))?;
    let written = package
        .write(&args.out)
        .map_err(|e| MainError::Package(e.to_string()))?;
    for path in &written {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        println!("{:>9.1} KiB  {}", len as f64 / 1024.0, path.display());
    }
    println!(
        "sluice build: package {} {} in {}; an app installs it with `npm install {}`",
        sluice::package::NAME,
        env!("CARGO_PKG_VERSION"),
        args.out.display(),
        args.out.display()
    );
    Ok(())
}
