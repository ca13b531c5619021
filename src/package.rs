//! The package an app installs (`sluice build --out DIR`), and what the demo server serves
//! under `/pkg/`: one layout for both, so the demo loads Sluice exactly as an app does.
//!
//! - `sluice-worker.js`: the worker's wasm-bindgen glue followed by its entry (the listeners,
//!   `sw/js/sluice-worker.js`), which an app's own service worker loads with one
//!   `importScripts` after setting `self.SLUICE_CONFIG`.
//! - `sluice_sw_bg.<hash>.wasm`: the worker's wasm, named by its content. The entry carries the
//!   name and the full SHA-256, so a worker caches each build's wasm under its own key and
//!   refuses, at install, a wasm that is not the one its glue was generated with.
//! - `sluice_client.js` and `.d.ts`, `sluice_client_bg.wasm` (and its `.d.ts`): the page
//!   client as an ES module with its TypeScript declarations.
//! - `sluice-inspector.js` and `.d.ts` (`import 'sluice/inspector'`): the `<sluice-inspector>`
//!   element, plain JavaScript beside the page client (`client/js/`), so that it costs the
//!   client's wasm nothing.
//! - `package.json`: name, version (the crate's), `exports`, `types`, `files`, so that
//!   `npm install DIR` and `npm pack` work, and `sluice.workerFiles`: what an app serves to its
//!   service worker (the two worker files above) at a URL of its choosing.
//! - `vite.js` and `vite.d.ts` (`import sluice from 'sluice/vite'`): the Vite plugin that
//!   serves and emits the worker files, and lets Vite serve the client's wasm.
//! - `copy-worker-files.js` (`npx sluice-copy-worker-files DIR`, the package's one `bin`): the
//!   worker files copied into a folder, for other bundlers. Both read `worker-files.js`.
//! - `README.md`: the three places an app wires it in.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::assets;

/// The npm package's name: what apps import (`import init, { Sluice } from 'sluice'`).
pub const NAME: &str = "sluice";
/// The file an app's worker script loads with `importScripts`.
pub const WORKER_ENTRY: &str = "sluice-worker.js";
/// The worker entry's source: the listeners around the wasm, with placeholders for the wasm's
/// name and hash.
const WORKER_TEMPLATE: &str = include_str!("../sw/js/sluice-worker.js");
const WASM_FILE_MARK: &str = "@SLUICE_WASM_FILE@";
const WASM_SHA256_MARK: &str = "@SLUICE_WASM_SHA256@";
/// The page client's files, as wasm-bindgen writes them.
const CLIENT_FILES: [&str; 4] = [
    "sluice_client.js",
    "sluice_client.d.ts",
    "sluice_client_bg.wasm",
    "sluice_client_bg.wasm.d.ts",
];
/// The package's own README (what npm shows): how an app wires the two halves together.
const PACKAGE_README: &str = include_str!("package/README.md");
/// The bundler side, in Node: the Vite plugin, the copy command and what both read. Plain
/// files of the package, so an app runs them with the page client they belong to.
const NODE_FILES: [(&str, &str); 4] = [
    ("vite.js", include_str!("package/vite.js")),
    ("vite.d.ts", include_str!("package/vite.d.ts")),
    ("worker-files.js", include_str!("package/worker-files.js")),
    (
        COPY_COMMAND_FILE,
        include_str!("package/copy-worker-files.js"),
    ),
];
/// `sluice/vite`: the Vite plugin's export.
const VITE_PLUGIN: &str = "vite.js";
/// The page's other files, plain JavaScript beside the client: the inspector element and its
/// types (`client/js/`).
const PAGE_FILES: [(&str, &str); 2] = [
    (INSPECTOR, include_str!("../client/js/sluice-inspector.js")),
    (
        "sluice-inspector.d.ts",
        include_str!("../client/js/sluice-inspector.d.ts"),
    ),
];
/// `sluice/inspector`: the `<sluice-inspector>` element's export, also served as `/pkg/` files.
pub const INSPECTOR: &str = "sluice-inspector.js";
/// The command other bundlers run (`node_modules/.bin/sluice-copy-worker-files DIR`).
pub const COPY_COMMAND: &str = "sluice-copy-worker-files";
const COPY_COMMAND_FILE: &str = "copy-worker-files.js";
const CLIENT_MODULE: &str = "sluice_client.js";
const CLIENT_TYPES: &str = "sluice_client.d.ts";
/// Every name the worker's wasm has had in a package: an older build's leftovers in the output
/// directory are removed by [`Package::write`].
const WORKER_WASM_PREFIX: &str = "sluice_sw_bg.";

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("the wasm bindings have no {0}: the build of this binary is incomplete (run `cargo build --release` again)")]
    MissingBundle(&'static str),
    #[error("this binary was built with SLUICE_SKIP_WASM, so it holds no wasm to package: build it again without that variable")]
    NoWasm,
    #[error("the worker's wasm-bindgen glue lacks {0}, which the worker entry (sw/js/sluice-worker.js) relies on: a wasm-bindgen upgrade changed its shape, so update the entry with it")]
    GlueShape(&'static str),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The package's files, by name (flat: every file lies at the package's root).
#[derive(Debug)]
pub struct Package {
    files: Vec<(String, Vec<u8>)>,
    worker_wasm: String,
}

impl Package {
    /// The package made of the bindings embedded in this binary, made once.
    pub fn embedded() -> Result<&'static Package, &'static PackageError> {
        static PACKAGE: OnceLock<Result<Package, PackageError>> = OnceLock::new();
        PACKAGE
            .get_or_init(|| Package::from_bindings(assets::pkg))
            .as_ref()
    }

    /// Makes the package from wasm-bindgen's output, looked up by file name.
    pub fn from_bindings<'a>(
        binding: impl Fn(&str) -> Option<&'a [u8]>,
    ) -> Result<Package, PackageError> {
        let need = |name: &'static str| binding(name).ok_or(PackageError::MissingBundle(name));
        let wasm = need("sluice_sw_bg.wasm")?;
        let glue = need("sluice_sw.js")?;
        // What the entry assumes of the glue: the name it binds, and the key of the imports
        // it instantiates with (`GLUE_IMPORTS` in the entry).
        let glue_text = String::from_utf8_lossy(glue);
        for shape in ["let wasm_bindgen = ", "\"./sluice_sw_bg.js\""] {
            if !glue_text.contains(shape) {
                return Err(PackageError::GlueShape(shape));
            }
        }
        let sha256 = sha256_hex(wasm);
        // 64 bits of the hash tell builds apart; the entry checks all 256.
        let worker_wasm = format!("{WORKER_WASM_PREFIX}{}.wasm", &sha256[..16]);
        // The glue binds the first instance it makes for good; as a factory, each call makes a
        // fresh copy, so a worker whose instance broke can start another (see `Fenced` in the
        // entry).
        let entry = format!(
            "// {NAME} {version}: the worker entry (wasm-bindgen's glue, then the listeners). \
             Written by `sluice build`.\n\
             // wasm-bindgen's glue, made fresh for each wasm instance.\n\
             function sluiceGlue() {{\n{glue}\nreturn wasm_bindgen;\n}}\n{listeners}",
            version = env!("CARGO_PKG_VERSION"),
            glue = glue_text,
            listeners = WORKER_TEMPLATE
                .replace(WASM_FILE_MARK, &worker_wasm)
                .replace(WASM_SHA256_MARK, &sha256),
        );
        let mut files = vec![
            (WORKER_ENTRY.to_string(), entry.into_bytes()),
            (worker_wasm.clone(), wasm.to_vec()),
        ];
        for name in CLIENT_FILES {
            files.push((name.to_string(), need(name)?.to_vec()));
        }
        for (name, text) in NODE_FILES.iter().chain(&PAGE_FILES) {
            files.push((name.to_string(), text.as_bytes().to_vec()));
        }
        files.push(("README.md".to_string(), PACKAGE_README.as_bytes().to_vec()));
        let manifest = manifest(&files, &worker_wasm);
        files.push(("package.json".to_string(), manifest.into_bytes()));
        files.sort();
        Ok(Package { files, worker_wasm })
    }

    /// Every file, sorted by name.
    pub fn files(&self) -> &[(String, Vec<u8>)] {
        &self.files
    }

    /// One file by name.
    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.files[i].1.as_slice())
    }

    /// The worker wasm's file name, `sluice_sw_bg.<hash>.wasm`.
    pub fn worker_wasm(&self) -> &str {
        &self.worker_wasm
    }

    /// Writes every file into `dir` (created if needed) and removes the worker wasm of older
    /// builds there; returns the paths written.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, PackageError> {
        if self.file(&self.worker_wasm).is_none_or(<[u8]>::is_empty) {
            return Err(PackageError::NoWasm);
        }
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| PackageError::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
        let mut written = Vec::new();
        for (name, bytes) in &self.files {
            let path = dir.join(name);
            std::fs::write(&path, bytes).map_err(failed(&path))?;
            if name == COPY_COMMAND_FILE {
                make_executable(&path).map_err(failed(&path))?;
            }
            written.push(path);
        }
        for entry in std::fs::read_dir(dir).map_err(failed(dir))? {
            let path = entry.map_err(failed(dir))?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let older_build = name.starts_with(WORKER_WASM_PREFIX)
                && name.ends_with(".wasm")
                && name != self.worker_wasm;
            if older_build {
                std::fs::remove_file(&path).map_err(failed(&path))?;
            }
        }
        Ok(written)
    }
}

/// The `bin` script runs from the folder as written (`npm install DIR` links it), not only once
/// npm has set its mode on install.
#[cfg(unix)]
fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `package.json`: every file is listed in `files` and reachable through `exports`.
fn manifest(files: &[(String, Vec<u8>)], worker_wasm: &str) -> String {
    let mut exports = Map::new();
    // A plain target: TypeScript finds `sluice_client.d.ts` beside it (a conditions object
    // would need "types" first, and serde_json sorts keys).
    exports.insert(".".into(), Value::String(format!("./{CLIENT_MODULE}")));
    // `import sluice from 'sluice/vite'`; TypeScript finds `vite.d.ts` beside it.
    exports.insert("./vite".into(), Value::String(format!("./{VITE_PLUGIN}")));
    // `import 'sluice/inspector'`; TypeScript finds `sluice-inspector.d.ts` beside it.
    exports.insert(
        "./inspector".into(),
        Value::String(format!("./{INSPECTOR}")),
    );
    let mut names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    names.push("package.json");
    names.sort_unstable();
    for name in &names {
        exports.insert(format!("./{name}"), Value::String(format!("./{name}")));
    }
    let manifest = json!({
        "name": NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "description": "A rate-limited, persistent HTTP action queue in a service worker (Rust, \
                        compiled to WebAssembly): the page client and the worker entry",
        "license": env!("CARGO_PKG_LICENSE"),
        "type": "module",
        "main": format!("./{CLIENT_MODULE}"),
        "types": format!("./{CLIENT_TYPES}"),
        "exports": exports,
        "files": names,
        "bin": { COPY_COMMAND: format!("./{COPY_COMMAND_FILE}") },
        "sluice": {
            "workerEntry": WORKER_ENTRY,
            "workerFiles": [WORKER_ENTRY, worker_wasm],
        },
    });
    // A manifest of strings and lists always serialises; the fallback is never reached.
    let mut text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bindings(wasm: &'static [u8]) -> impl Fn(&str) -> Option<&'static [u8]> {
        move |name| match name {
            "sluice_sw_bg.wasm" => Some(wasm),
            "sluice_sw.js" => {
                Some(b"let wasm_bindgen = (() => ({ \"./sluice_sw_bg.js\": {} }))();".as_slice())
            }
            n if CLIENT_FILES.contains(&n) => Some(b"client".as_slice()),
            _ => None,
        }
    }

    #[test]
    fn the_template_has_each_placeholder_once() {
        assert_eq!(WORKER_TEMPLATE.matches(WASM_FILE_MARK).count(), 1);
        assert_eq!(WORKER_TEMPLATE.matches(WASM_SHA256_MARK).count(), 1);
    }

    #[test]
    fn the_worker_wasm_is_named_and_checked_by_its_content() {
        let a = Package::from_bindings(bindings(b"\0asm one build")).expect("package");
        let b = Package::from_bindings(bindings(b"\0asm another")).expect("package");
        assert_ne!(a.worker_wasm(), b.worker_wasm());
        let name = a.worker_wasm();
        assert!(
            name.starts_with("sluice_sw_bg.") && name.ends_with(".wasm"),
            "{name}"
        );
        assert_eq!(a.file(name), Some(b"\0asm one build".as_slice()));
        let entry = String::from_utf8(a.file(WORKER_ENTRY).expect("entry").to_vec()).unwrap();
        let sha256 = sha256_hex(b"\0asm one build");
        assert!(
            entry.contains(&format!("const WASM_FILE = '{name}';")),
            "{entry}"
        );
        assert!(entry.contains(&format!("const WASM_SHA256 = '{sha256}';")));
        assert!(!entry.contains(WASM_FILE_MARK) && !entry.contains(WASM_SHA256_MARK));
        // The glue comes first, as a factory the listeners call.
        assert!(
            entry
                .find("function sluiceGlue() {\nlet wasm_bindgen")
                .unwrap()
                < entry.find("addEventListener").unwrap()
        );
    }

    #[test]
    fn the_manifest_lists_and_exports_every_file() {
        let p = Package::from_bindings(bindings(b"\0asm")).expect("package");
        let manifest: Value =
            serde_json::from_slice(p.file("package.json").expect("package.json")).unwrap();
        assert_eq!(manifest["name"], NAME);
        assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(manifest["types"], "./sluice_client.d.ts");
        assert_eq!(manifest["exports"]["."], "./sluice_client.js");
        assert_eq!(manifest["exports"]["./vite"], "./vite.js");
        assert_eq!(manifest["exports"]["./inspector"], "./sluice-inspector.js");
        assert_eq!(
            manifest["bin"][COPY_COMMAND],
            format!("./{COPY_COMMAND_FILE}")
        );
        for (name, _) in NODE_FILES.iter().chain(&PAGE_FILES) {
            assert!(p.file(name).is_some(), "{name} is in the package");
        }
        let listed: Vec<&str> = manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let names: Vec<&str> = p.files().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(listed, names);
        for name in names {
            assert_eq!(
                manifest["exports"][format!("./{name}")],
                format!("./{name}")
            );
        }
        assert_eq!(
            manifest["sluice"]["workerFiles"],
            json!([WORKER_ENTRY, p.worker_wasm()])
        );
    }

    #[test]
    fn a_missing_binding_is_named() {
        let err = Package::from_bindings(|_| None).unwrap_err();
        assert!(err.to_string().contains("sluice_sw_bg.wasm"), "{err}");
    }

    #[test]
    fn writing_replaces_an_older_builds_wasm_and_keeps_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let old = Package::from_bindings(bindings(b"\0asm old")).unwrap();
        old.write(dir.path()).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let new = Package::from_bindings(bindings(b"\0asm new")).unwrap();
        let written = new.write(dir.path()).unwrap();
        assert_eq!(written.len(), new.files().len());
        assert!(!dir.path().join(old.worker_wasm()).exists());
        assert!(dir.path().join(new.worker_wasm()).exists());
        assert!(dir.path().join("notes.txt").exists());
    }

    #[test]
    fn a_build_without_wasm_is_refused() {
        let p = Package::from_bindings(bindings(b"")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(p.write(dir.path()), Err(PackageError::NoWasm)));
    }
}
