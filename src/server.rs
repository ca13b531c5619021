//! The whole demo site as one same-origin router: `www/` files (the demo's worker script at
//! `/sw.js`), the package an app installs under `/pkg/` (see [`crate::package`]), and the demo
//! and control APIs.

use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::api::{self, ApiConfig, ApiHandle};
use crate::assets;
/// Where the servers of this binary start listening (kept at this path for its callers).
pub use crate::listen::serve_in_background;
use crate::package::{Package, WORKER_ENTRY};

/// Where `www/` files come from.
#[derive(Clone, Debug, Default)]
pub enum WwwSource {
    /// The copy embedded at build time: the binary needs no files beside it.
    #[default]
    Embedded,
    /// Read from this directory on every request, for editing the page without rebuilding.
    Dir(PathBuf),
}

/// The demo site and API on one origin.
pub fn router(api: ApiHandle, www: WwwSource) -> Router {
    router_allowing(api, www, Vec::new())
}

/// [`router`], with the worker script served allowing jobs to `other_origins` as well as to
/// its own (the same API served on another port, as a real deployment calls an API on another
/// origin): the worker sends only where its script allows.
pub fn router_allowing(api: ApiHandle, www: WwwSource, other_origins: Vec<String>) -> Router {
    api::router(api).fallback(move |method: Method, uri: Uri| {
        static_file(www.clone(), other_origins.clone(), method, uri)
    })
}

/// A worker script that loads Sluice (`importScripts('/any/path/sluice-worker.js');`, the
/// demo's `sw.js` or an app's) with `self.SLUICE_CONFIG.allow` set to its own origin and
/// `other_origins`, just before the line that loads the worker entry; any other script as it
/// is.
fn allowing(script: Vec<u8>, other_origins: &[String]) -> Vec<u8> {
    let text = match String::from_utf8(script) {
        Ok(text) => text,
        Err(e) => return e.into_bytes(),
    };
    let Some(at) = import_line_start(&text) else {
        return text.into_bytes();
    };
    let mut list = String::from("self.location.origin + '/'");
    for o in other_origins {
        list.push_str(&format!(", '{}/'", o.trim_end_matches('/')));
    }
    let line = format!(
        "// Added by the demo server: the API it also serves on another origin.\n\
         self.SLUICE_CONFIG.allow = [{list}];\n"
    );
    let mut out = text;
    out.insert_str(at, &line);
    out.into_bytes()
}

/// Where the first line that imports the worker entry starts.
fn import_line_start(text: &str) -> Option<usize> {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let code = line.trim();
        if code.starts_with("importScripts(") && code.contains(WORKER_ENTRY) {
            return Some(start);
        }
        start += line.len();
    }
    None
}

/// Serves the whole site on `127.0.0.1` at a free port in the background of the current tokio
/// runtime (it stops with the runtime): what end-to-end tests load in a browser.
pub async fn spawn(config: ApiConfig) -> std::io::Result<(SocketAddr, ApiHandle)> {
    config
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let api = ApiHandle::new(config);
    let addr = serve_in_background(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        router(api.clone(), WwwSource::Embedded),
    )
    .await?;
    Ok((addr, api))
}

async fn static_file(
    www: WwwSource,
    other_origins: Vec<String>,
    method: Method,
    uri: Uri,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let path = uri.path();
    if let Some(rest) = path.strip_prefix("/pkg/") {
        return match Package::embedded() {
            Ok(package) => match package.file(rest) {
                Some(bytes) => file_response(rest, bytes.to_vec()),
                None => not_found(),
            },
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        };
    }
    let mut rel = path.trim_start_matches('/').to_owned();
    if rel.is_empty() || rel.ends_with('/') {
        rel.push_str("index.html");
    }
    let bytes = match &www {
        WwwSource::Embedded => assets::www(&rel).map(<[u8]>::to_vec),
        WwwSource::Dir(dir) => read_under(dir, &rel).await,
    };
    let Some(mut bytes) = bytes else {
        return not_found();
    };
    // Any worker script: the demo's `sw.js`, or a variant of it a test serves beside it.
    if rel.ends_with(".js") && !other_origins.is_empty() {
        bytes = allowing(bytes, &other_origins);
    }
    let mut res = file_response(&rel, bytes);
    if rel == "sw.js" {
        // Lets the worker control the whole origin even if the shim moves into a subfolder.
        res.headers_mut()
            .insert("service-worker-allowed", HeaderValue::from_static("/"));
    }
    res
}

/// Reads `rel` inside `dir`, refusing anything that would climb out of it.
async fn read_under(dir: &Path, rel: &str) -> Option<Vec<u8>> {
    let rel = Path::new(rel);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    tokio::fs::read(dir.join(rel)).await.ok()
}

fn file_response(name: &str, bytes: Vec<u8>) -> Response {
    let mut res = Body::from(bytes).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(assets::content_type(name)),
    );
    // A demo under development: a stale worker or wasm bundle is the worst kind of confusing.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_script_is_served_allowing_the_other_origin() {
        for import in [
            "importScripts('/pkg/sluice-worker.js');",
            "  importScripts(\"/vendor/sluice/sluice-worker.js\");",
        ] {
            let script = format!("self.SLUICE_CONFIG = {{}};\n{import}\n// sluice-worker.js\n");
            let out = String::from_utf8(allowing(
                script.into_bytes(),
                &["http://127.0.0.1:9".into()],
            ))
            .unwrap();
            let allow = "// Added by the demo server: the API it also serves on another origin.\n\
                         self.SLUICE_CONFIG.allow = [self.location.origin + '/', \
                         'http://127.0.0.1:9/'];\n";
            assert_eq!(
                out,
                format!("self.SLUICE_CONFIG = {{}};\n{allow}{import}\n// sluice-worker.js\n")
            );
        }
        // A script that does not load the worker is served as it is.
        let other = b"console.log(1);".to_vec();
        assert_eq!(allowing(other.clone(), &["http://x".into()]), other);
    }
}
