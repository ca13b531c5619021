//! Builds the two wasm crates and embeds them, with the demo's static files, in the `sluice`
//! binary, so that `cargo run --release` alone gives a working demo.
//!
//! The wasm crates are built by a nested `cargo` with its own `--target-dir`: sharing the outer
//! one would deadlock on its lock, and a separate directory keeps the wasm artefacts cached
//! between host builds of any profile. `wasm-bindgen-cli-support` then runs as a library, which
//! avoids needing a `wasm-bindgen` binary of exactly the right version on the machine.
//!
//! `SLUICE_SKIP_WASM=1` skips the wasm build and embeds empty stand-ins, for quick host-only
//! checks or while a wasm crate does not compile. `SLUICE_WASM_NAMES=1` keeps the function
//! names in the wasm, so that `twiggy top` on `<out>/pkg/sluice_sw_bg.wasm` says what is heavy
//! (never ship that build: the names are more than half of it). When binaryen's `wasm-opt` is
//! installed in `tools/binaryen` it then shrinks both wasm files (see [`WasmOpt`]); without it
//! they are larger and the build says so.

use std::collections::{HashMap, HashSet};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use wasm_bindgen_cli_support::{Bindgen, Output};

const WASM_TARGET: &str = "wasm32-unknown-unknown";
const WASM_PROFILE: &str = "wasm-release";

type BoxError = Box<dyn std::error::Error>;

fn main() {
    if let Err(e) = run() {
        // Cargo shows a failed build script's stderr; a panic would bury the message under a
        // backtrace of this script, which is never the interesting part.
        eprintln!("sluice build script failed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), BoxError> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    for p in [
        "Cargo.toml",
        "Cargo.lock",
        "rust-toolchain.toml",
        "shared",
        "json",
        "sw",
        "client",
        "www",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-env-changed=SLUICE_SKIP_WASM");
    println!("cargo:rerun-if-env-changed=SLUICE_WASM_NAMES");

    let pkg_dir = out_dir.join("pkg");
    if pkg_dir.exists() {
        // Stale files from an earlier bindgen run (say a removed snippet) must not be embedded.
        fs::remove_dir_all(&pkg_dir)?;
    }
    fs::create_dir_all(&pkg_dir)?;

    let skip = env::var("SLUICE_SKIP_WASM").is_ok_and(|v| !v.is_empty() && v != "0");
    if skip {
        println!("cargo:warning=SLUICE_SKIP_WASM is set: /pkg/ serves empty stand-ins");
        write_stand_ins(&pkg_dir)?;
    } else {
        let wasm_dir = build_wasm(&root, &out_dir)?;
        let wasm_opt = find_wasm_opt(&root);
        bindgen(
            &wasm_dir.join("sluice_sw.wasm"),
            &pkg_dir,
            Flavour::ClassicWorker,
            wasm_opt.as_ref(),
        )?;
        bindgen(
            &wasm_dir.join("sluice_client.wasm"),
            &pkg_dir,
            Flavour::EsModule,
            wasm_opt.as_ref(),
        )?;
        append_client_classes(&root, &pkg_dir)?;
        report_sizes(&pkg_dir, wasm_opt.as_ref())?;
    }

    write_listing(&pkg_dir, &out_dir.join("pkg_files.rs"), "PKG_FILES")?;
    write_listing(
        &root.join("www"),
        &out_dir.join("www_files.rs"),
        "WWW_FILES",
    )?;
    Ok(())
}

/// Where the nested build puts its output: beside the outer profiles inside the same target
/// directory, so `cargo clean` removes it and every host profile reuses it.
fn wasm_target_dir(root: &Path, out_dir: &Path) -> PathBuf {
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out.
    let from_out_dir = out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .and_then(Path::parent)
        .and_then(Path::parent);
    match from_out_dir {
        Some(target) => target.join("wasm"),
        None => root.join("target").join("wasm"),
    }
}

/// Makes sure the toolchain building us has the wasm32 standard library, adding it through rustup
/// when it is missing.
///
/// `rust-toolchain.toml` names the target, but rustup adds a toolchain file's `targets` only when
/// it installs that toolchain: on a machine that already had 1.95.0, `cargo run --release` would
/// otherwise fail with "can't find crate for `core`". The build asks the compiler where the
/// target's libraries live and looks for `libcore` there, so a machine without rustup (a distro
/// toolchain with the target packaged) is served too.
fn ensure_wasm_target() -> Result<(), BoxError> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    if wasm_std_present(&rustc)? {
        return Ok(());
    }
    // Under rustup, `RUSTUP_TOOLCHAIN` names the toolchain this build runs on (the one the
    // toolchain file chose); adding the target to any other would not help.
    let toolchain = env::var("RUSTUP_TOOLCHAIN").ok();
    println!(
        "cargo:warning=the {WASM_TARGET} target is missing from toolchain {}: adding it with rustup",
        toolchain.as_deref().unwrap_or("(default)")
    );
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", WASM_TARGET]);
    if let Some(t) = &toolchain {
        cmd.args(["--toolchain", t]);
    }
    let added = match cmd.status() {
        Ok(status) => status.success(),
        Err(e) => {
            return Err(format!(
                "the {WASM_TARGET} target is not installed for {rustc} and rustup could not be \
                 run ({e}). Install the target's standard library for this compiler, or build \
                 the host binary alone with SLUICE_SKIP_WASM=1"
            )
            .into())
        }
    };
    if !added || !wasm_std_present(&rustc)? {
        return Err(format!(
            "`rustup target add {WASM_TARGET}` did not install the target's standard library \
             (its output is above); run it by hand, or build the host binary alone with \
             SLUICE_SKIP_WASM=1"
        )
        .into());
    }
    Ok(())
}

/// Whether `rustc`'s sysroot holds the wasm32 `core` library.
fn wasm_std_present(rustc: &str) -> Result<bool, BoxError> {
    let out = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .map_err(|e| format!("could not run {rustc} to find the {WASM_TARGET} libraries: {e}"))?;
    if !out.status.success() {
        return Ok(false);
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(false);
    };
    Ok(entries.filter_map(Result::ok).any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("libcore-") && name.ends_with(".rlib")
    }))
}

fn build_wasm(root: &Path, out_dir: &Path) -> Result<PathBuf, BoxError> {
    ensure_wasm_target()?;
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let target_dir = wasm_target_dir(root, out_dir);

    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .arg("build")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["-p", "sluice-sw", "-p", "sluice-client"])
        .args(["--target", WASM_TARGET])
        .args(["--profile", WASM_PROFILE])
        .arg("--target-dir")
        .arg(&target_dir);

    // The outer build hands its build script settings meant for the host crate; passed on, they
    // would reach the wasm crates' rustc (host RUSTFLAGS, a wrapper like clippy-driver) or
    // redirect the nested cargo (target dir, target triple).
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let leaks = key.starts_with("CARGO_CFG_")
            || key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || key.starts_with("DEP_")
            || matches!(
                key,
                "CARGO_ENCODED_RUSTFLAGS"
                    | "CARGO_BUILD_RUSTFLAGS"
                    | "CARGO_BUILD_TARGET"
                    | "CARGO_BUILD_TARGET_DIR"
                    | "CARGO_TARGET_DIR"
                    | "CARGO_MAKEFLAGS"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_CRATE_NAME"
                    | "RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "RUSTC"
                    | "RUSTDOC"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "RUSTC_LINKER"
                    | "TARGET"
                    | "HOST"
                    | "PROFILE"
                    | "OUT_DIR"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
                    | "MAKEFLAGS"
                    | "MFLAGS"
            );
        if leaks {
            cmd.env_remove(key);
        }
    }

    // These flags take the place of any `rustflags` in cargo's configuration for this nested
    // build: the wasm is built the same way wherever it is built.
    let flags = remapped_paths();
    if !flags.is_empty() {
        cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    }

    let status = cmd.status()?;
    if !status.success() {
        return Err(format!(
            "nested `cargo build --target {WASM_TARGET} --profile {WASM_PROFILE} -p sluice-sw \
             -p sluice-client` failed ({status}); its errors are above. If the target is \
             missing: `rustup target add {WASM_TARGET}`. To build the host binary anyway: \
             SLUICE_SKIP_WASM=1"
        )
        .into());
    }
    Ok(target_dir.join(WASM_TARGET).join(WASM_PROFILE))
}

/// `--remap-path-prefix` flags that cut the registry's directory
/// (`~/.cargo/registry/src/<index>/`) from the source paths the wasm carries in its panic
/// messages: the worker's wasm is 80 bytes smaller gzipped (600 before), and it no longer
/// depends on where cargo keeps its crates. (Cargo's `trim-paths` profile option would do
/// this, but it is not stable; the standard library's `/rustc/<commit>/` paths come already
/// fixed in its metadata, and a remap does not reach them.)
fn remapped_paths() -> Vec<String> {
    let mut flags = Vec::new();
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(Ok(indexes)) = cargo_home.map(|h| fs::read_dir(h.join("registry").join("src"))) {
        for index in indexes.flatten() {
            flags.push(format!("--remap-path-prefix={}/=", index.path().display()));
        }
    }
    flags
}

#[derive(Clone, Copy)]
enum Flavour {
    /// Loaded by `importScripts` from a classic worker script, which every browser supports.
    ClassicWorker,
    /// Imported by pages as an ES module, with TypeScript declarations for page code.
    EsModule,
}

fn bindgen(
    wasm: &Path,
    pkg_dir: &Path,
    flavour: Flavour,
    wasm_opt: Option<&WasmOpt>,
) -> Result<(), BoxError> {
    if !wasm.exists() {
        return Err(format!("{} was not produced by the nested build", wasm.display()).into());
    }
    let mut b = Bindgen::new();
    b.input_path(wasm);
    match flavour {
        Flavour::ClassicWorker => b.no_modules(true)?.typescript(false),
        // As a library, the CLI support omits the default `new URL('…_bg.wasm',
        // import.meta.url)`; pages expect a bare `await init()` to find the wasm beside the JS.
        Flavour::EsModule => b
            .web(true)?
            .typescript(true)
            .omit_default_module_path(false),
    };
    // `SLUICE_WASM_NAMES=1` keeps function names, for size analysis (`twiggy top` on the
    // `_bg.wasm`); they cost more than half the file, so never ship such a build.
    let keep_names = env::var("SLUICE_WASM_NAMES").is_ok_and(|v| !v.is_empty() && v != "0");
    let failed = |e| format!("wasm-bindgen on {}: {e:#}", wasm.display());
    let mut output = b
        .remove_name_section(!keep_names)
        .remove_producers_section(true)
        .generate_output()
        .map_err(&failed)?;
    // A build that keeps names for size analysis keeps the glue's names too, so that a stack
    // through the glue names the binding.
    let renamed = if keep_names {
        Vec::new()
    } else {
        shorten_names(&mut output)
    };
    output.emit(pkg_dir).map_err(failed)?;
    let (js_name, wasm_name, typings): (&str, &str, &[&str]) = match flavour {
        Flavour::ClassicWorker => ("sluice_sw.js", "sluice_sw_bg.wasm", &[]),
        Flavour::EsModule => (
            "sluice_client.js",
            "sluice_client_bg.wasm",
            // (`sluice_client_bg.wasm.d.ts` is written from the renamed wasm.)
            &["sluice_client.d.ts"],
        ),
    };
    if let Some(wasm_opt) = wasm_opt {
        wasm_opt.run(&pkg_dir.join(wasm_name), keep_names)?;
    }
    rename_in_glue(&pkg_dir.join(js_name), &renamed, true)?;
    write_name_map(&pkg_dir.join(js_name), &renamed)?;
    // The typings name the exports the page may reach through `init()`'s result.
    for name in typings {
        rename_in_glue(&pkg_dir.join(name), &renamed, false)?;
    }
    Ok(())
}

/// Binaryen's `wasm-opt`, the Node.js build that `tools/binaryen/package-lock.json` pins
/// (`npm ci --prefix tools/binaryen`; `.ci/run` installs it before it builds).
///
/// Not a `wasm-opt` found on `PATH`: Debian 12's package (binaryen 108) breaks this wasm (it
/// exports the function table where wasm-bindgen's `__wbindgen_externrefs` table was, so every
/// page fails at `init()`: "WebAssembly.Table.set(): Argument 1 is invalid for table"), and a
/// pinned version gives every machine the same bytes. Not the `wasm-opt` crate either: it
/// compiles binaryen's ~240 C++ files into the build script, over 14 minutes for half of them on
/// a 2-core machine, and again for each host profile.
struct WasmOpt {
    script: PathBuf,
}

/// `wasm-opt` when it is installed. Without it the build still works and its wasm is only
/// larger (about 3.6 KB of the worker gzipped, 1.3 KB of the page client), so its absence is a
/// warning, not an error; the budgets in `.ci/run` are checked against the optimized files.
fn find_wasm_opt(root: &Path) -> Option<WasmOpt> {
    let dir = root.join("tools").join("binaryen");
    // Installing or updating it there reruns this script.
    println!("cargo:rerun-if-changed={}", dir.display());
    let script = dir.join("node_modules/binaryen/bin/wasm-opt");
    script.is_file().then_some(WasmOpt { script })
}

impl WasmOpt {
    /// Optimizes a wasm file wasm-bindgen wrote, in place, with binaryen's size preset (`-Os`)
    /// less one kind of inlining: a function with a single caller stays a function
    /// (`--one-caller-inline-max-function-size 0`). Measured on the worker (gzipped): 199,851 B
    /// before; 194,756 B so; 196,216 B with `-O1 --shrink-level=1`, which does not inline;
    /// 204,679 B with `-Os` as it is, 204,774 B with `-Oz`. Inlining the functions LLVM at
    /// `opt-level = "z"` kept apart makes the file smaller before gzip and larger after. It runs
    /// after wasm-bindgen, which reads its descriptors from the wasm rustc wrote. A build with
    /// `SLUICE_WASM_NAMES=1` keeps the names (`-g`), so that `twiggy` sees the code that ships.
    /// The wasm's features are read from its `target_features` section.
    ///
    /// Two more flags (measured on the worker of issue 40's change, gzipped; page client in
    /// brackets): 205,447 B (59,933) with the above; `--low-memory-unused` 204,536 B (59,791);
    /// with `--converge` too, 204,023 B (59,814), at about 8 s more of the build.
    /// `--low-memory-unused` lets binaryen fold a constant added to an address into the
    /// load's or store's offset, which differs only where the sum would wrap past 4 GiB into
    /// the first KiB of memory. Nothing of ours is there: rustc puts the 1 MiB stack first
    /// (the stack pointer starts at 1,048,576 and grows down), the data and the heap after
    /// it, so the first KiB is reached only by a stack one KiB short of overflowing.
    /// `--converge` runs the passes again until the file stops shrinking.
    ///
    /// Four more (issue 40, measured at 292eb5b, gzipped; page client in brackets): 204,582 B
    /// (60,847) with the above; with them, 204,345 B (60,680), at no measurable build time.
    /// `--precompute-propagate` folds values known at build time through locals too,
    /// `--coalesce-locals-learning` and `--reorder-locals` give functions fewer locals, numbered
    /// by use, and `--strip-target-features` drops the custom section that lists the wasm's
    /// features (148 B), which only tools read: a browser compiles what the code uses. The
    /// first three only rewrite code to code that computes the same. Tried and left out:
    /// `--gufa-optimizing` (46 B larger), `--reorder-functions` (10 KB larger: gzip finds more
    /// repeats in LLVM's order, where a module's functions are together).
    fn run(&self, wasm: &Path, keep_names: bool) -> Result<(), BoxError> {
        let mut cmd = Command::new("node");
        cmd.arg(&self.script).args([
            "-Os",
            "--one-caller-inline-max-function-size",
            "0",
            "--low-memory-unused",
            "--converge",
            "--precompute-propagate",
            "--coalesce-locals-learning",
            "--reorder-locals",
            "--strip-target-features",
        ]);
        if keep_names {
            cmd.arg("-g");
        }
        cmd.arg(wasm).arg("-o").arg(wasm);
        let status = cmd.status().map_err(|e| {
            format!(
                "running `node {}` on {}: {e}. wasm-opt needs Node.js; without \
                 tools/binaryen/node_modules the build goes on without it",
                self.script.display(),
                wasm.display()
            )
        })?;
        if !status.success() {
            return Err(format!(
                "wasm-opt failed on {} ({status}); its errors are above",
                wasm.display()
            )
            .into());
        }
        Ok(())
    }
}

/// Writes `<glue>.names.txt` beside the glue: each short name `shorten_names` gave, with the
/// binding's own name, so that a stack through the glue (`_3`, `_k1`) can be looked up. (A build
/// with `SLUICE_WASM_NAMES=1` renames nothing and writes an empty map.)
fn write_name_map(glue: &Path, renamed: &[(String, String)]) -> Result<(), BoxError> {
    let mut map = String::from("# short name in the wasm and its glue, then wasm-bindgen's name\n");
    for (old, new) in renamed {
        writeln!(map, "{new} {old}")?;
    }
    fs::write(glue.with_extension("names.txt"), map)?;
    Ok(())
}

/// Appends to the page client's module the JS classes its glue names without importing them
/// (`client/js/sluice-error.js`: `SluiceError`, which `client/src/web/convert.rs` constructs).
fn append_client_classes(root: &Path, pkg_dir: &Path) -> Result<(), BoxError> {
    let source = root.join("client").join("js").join("sluice-error.js");
    println!("cargo:rerun-if-changed={}", source.display());
    let class =
        fs::read_to_string(&source).map_err(|e| format!("reading {}: {e}", source.display()))?;
    let module = pkg_dir.join("sluice_client.js");
    let mut glue = fs::read_to_string(&module)?;
    if !glue.contains("new SluiceError(") {
        return Err("the page client's glue no longer constructs SluiceError: \
                    client/js/sluice-error.js is not needed, or the binding changed"
            .into());
    }
    glue.push_str(&class);
    fs::write(module, glue)?;
    Ok(())
}

/// Gives each function the wasm imports from its JS glue a short name (`_0`, `_1`, …), and each
/// closure entry point it exports to the glue another (`_k0`, `_k1`, …: `k` is no hex digit, so
/// the two never meet), in the wasm and in the glue alike. wasm-bindgen names imports after the
/// binding with a 16-digit hash (`__wbg_new_with_opt_str_and_init_6456bed24baae6fc`) and
/// closure exports after the closure's type with another
/// (`wasm_bindgen__convert__closures_____invoke__hf33873dee92e7985`), and the hashes barely
/// compress: with ~190 imports the import names were 2,964 B of the worker's gzipped wasm
/// (145,847 B, 142,883 B renamed) and 1,060 B of the page client's; the worker's 7 closure
/// exports were 95 B more (143,114 B, 143,019 B renamed). This is binaryen's
/// `--minify-imports-and-exports`, done here so that the glue is renamed alike; binaryen's
/// other passes are [`WasmOpt::run`]'s (`-Oz` made the gzipped worker larger, 150,058 B, and
/// still does). Returns the old and new names.
fn shorten_names(output: &mut Output) -> Vec<(String, String)> {
    let mut renamed = Vec::new();
    let wasm = output.wasm_mut();
    for import in wasm.imports.iter_mut() {
        if import.name.starts_with("__wbg") {
            let short = format!("_{:x}", renamed.len());
            renamed.push((std::mem::replace(&mut import.name, short.clone()), short));
        }
    }
    let mut closures = 0;
    for export in wasm.exports.iter_mut() {
        if export.name.starts_with("wasm_bindgen__convert__closures") {
            let short = format!("_k{closures:x}");
            closures += 1;
            renamed.push((std::mem::replace(&mut export.name, short.clone()), short));
        }
    }
    renamed
}

/// Applies [`shorten_names`]'s renames to a file that wasm-bindgen wrote: the glue, where each
/// import is a property of the object handed to the wasm and each export one of the wasm's
/// `exports` (`all`: every old name must be there, or the glue and the wasm would no longer
/// agree), or typings, which name only some. No new name may be there already.
fn rename_in_glue(js: &Path, renamed: &[(String, String)], all: bool) -> Result<(), BoxError> {
    let text = fs::read_to_string(js)?;
    let words = js_words(&text).collect::<HashSet<_>>();
    for (old, new) in renamed {
        if all && !words.contains(old.as_str()) {
            return Err(format!("{}: {old} is not in the glue", js.display()).into());
        }
        if words.contains(new.as_str()) {
            return Err(format!("{}: the short name {new} is taken", js.display()).into());
        }
    }
    let names: HashMap<&str, &str> = renamed
        .iter()
        .map(|(old, new)| (old.as_str(), new.as_str()))
        .collect();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for word in js_words(&text) {
        if let Some(new) = names.get(word) {
            // `word` borrows from `text`: its offset is where the name starts.
            let at = word.as_ptr() as usize - text.as_ptr() as usize;
            out.push_str(&text[copied..at]);
            out.push_str(new);
            copied = at + word.len();
        }
    }
    out.push_str(&text[copied..]);
    fs::write(js, out)?;
    Ok(())
}

/// The identifier-like words of JS text (letters, digits, `_`, `$`), as slices of it.
fn js_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty())
}

fn write_stand_ins(pkg_dir: &Path) -> Result<(), BoxError> {
    for name in [
        "sluice_sw.js",
        "sluice_client.js",
        "sluice_client.d.ts",
        "sluice_client_bg.wasm.d.ts",
    ] {
        fs::write(
            pkg_dir.join(name),
            "// built with SLUICE_SKIP_WASM: no wasm here\n",
        )?;
    }
    for name in ["sluice_sw_bg.wasm", "sluice_client_bg.wasm"] {
        fs::write(pkg_dir.join(name), b"")?;
    }
    Ok(())
}

fn report_sizes(pkg_dir: &Path, wasm_opt: Option<&WasmOpt>) -> Result<(), BoxError> {
    let mut parts = Vec::new();
    for name in ["sluice_sw_bg.wasm", "sluice_client_bg.wasm"] {
        let len = fs::metadata(pkg_dir.join(name))?.len();
        parts.push(format!("{name} {:.1} KiB", len as f64 / 1024.0));
    }
    let optimized = match wasm_opt {
        Some(_) => "optimized by wasm-opt",
        None => "not optimized: `npm ci --prefix tools/binaryen` for CI's smaller wasm",
    };
    println!(
        "cargo:warning=wasm sizes: {} ({optimized})",
        parts.join(", ")
    );
    Ok(())
}

/// Writes a Rust file holding `pub static NAME: &[(&str, &[u8])]` with every file under `dir`
/// (relative path with `/` separators, bytes embedded by `include_bytes!`), sorted by path.
fn write_listing(dir: &Path, dest: &Path, name: &str) -> Result<(), BoxError> {
    let mut files = Vec::new();
    if dir.is_dir() {
        collect_files(dir, dir, &mut files)?;
    }
    files.sort();
    let mut src = String::new();
    writeln!(src, "pub static {name}: &[(&str, &[u8])] = &[")?;
    for (rel, abs) in &files {
        writeln!(src, "    ({rel:?}, include_bytes!({abs:?})),")?;
    }
    writeln!(src, "];")?;
    fs::write(dest, src)?;
    Ok(())
}

fn collect_files(
    base: &Path,
    dir: &Path,
    files: &mut Vec<(String, String)>,
) -> Result<(), BoxError> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Editor droppings and dotfiles are never meant to be served.
        if name.starts_with('.') || name.ends_with('~') {
            continue;
        }
        if path.is_dir() {
            collect_files(base, &path, files)?;
        } else {
            let rel = path
                .strip_prefix(base)?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let abs = path
                .canonicalize()?
                .to_str()
                .ok_or_else(|| format!("non-UTF-8 path {}", path.display()))?
                .to_string();
            files.push((rel, abs));
        }
    }
    Ok(())
}
