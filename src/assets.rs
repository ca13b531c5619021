//! Files embedded at build time by `build.rs`: the wasm-bindgen output (which
//! [`crate::package`] makes into the package served under `/pkg/` and written by `sluice
//! build`) and the demo's `www/` directory, so the binary serves the whole demo with no files
//! beside it.

mod generated {
    include!(concat!(env!("OUT_DIR"), "/pkg_files.rs"));
    include!(concat!(env!("OUT_DIR"), "/www_files.rs"));
}

/// Every file of the wasm bundles, by path relative to `/pkg/`
/// (`sluice_sw.js`, `sluice_sw_bg.wasm`, `sluice_client.js`, `sluice_client_bg.wasm`,
/// `sluice_client.d.ts`, ...).
pub fn pkg_files() -> &'static [(&'static str, &'static [u8])] {
    generated::PKG_FILES
}

/// Every file of `www/` as it was at build time, by path relative to `www/`.
pub fn www_files() -> &'static [(&'static str, &'static [u8])] {
    generated::WWW_FILES
}

/// One file of the wasm bundles, by path relative to `/pkg/`.
pub fn pkg(path: &str) -> Option<&'static [u8]> {
    lookup(generated::PKG_FILES, path)
}

/// One embedded file of `www/`, by path relative to `www/`.
pub fn www(path: &str) -> Option<&'static [u8]> {
    lookup(generated::WWW_FILES, path)
}

fn lookup(files: &'static [(&'static str, &'static [u8])], path: &str) -> Option<&'static [u8]> {
    files
        .binary_search_by(|(p, _)| (*p).cmp(path))
        .ok()
        .map(|i| files[i].1)
}

/// The `Content-Type` for a file name. Browsers refuse `WebAssembly.instantiateStreaming` and
/// module scripts served with the wrong type, so the types that matter are exact.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext.to_ascii_lowercase().as_str() {
        "wasm" => "application/wasm",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "ts" => "application/typescript; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "webmanifest" => "application/manifest+json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "ico" => "image/x-icon",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_are_sorted_for_binary_search() {
        for files in [pkg_files(), www_files()] {
            assert!(files.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }

    #[test]
    fn bundles_are_embedded() {
        for name in [
            "sluice_sw.js",
            "sluice_sw_bg.wasm",
            "sluice_client.js",
            "sluice_client_bg.wasm",
            "sluice_client.d.ts",
        ] {
            assert!(pkg(name).is_some(), "{name} missing from /pkg/");
        }
        assert!(www("index.html").is_some());
        assert!(www("sw.js").is_some());
    }

    #[test]
    fn content_types_browsers_check() {
        assert_eq!(content_type("x_bg.wasm"), "application/wasm");
        assert!(content_type("sluice_sw.js").starts_with("text/javascript"));
        assert!(content_type("sluice_client.d.ts").starts_with("application/typescript"));
        assert!(content_type("index.html").starts_with("text/html"));
    }
}
