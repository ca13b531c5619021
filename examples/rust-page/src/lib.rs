//! A page in Rust using Sluice: registers the worker, subscribes to what it broadcasts, saves
//! one contact (`enqueue`), imports fifty (`enqueue_many`) and cancels the import (`cancel`).
//!
//! Build: `cargo build --target wasm32-unknown-unknown --release`, then
//! `wasm-bindgen --target web --out-dir pkg target/wasm32-unknown-unknown/release/sluice_rust_page_example.wasm`
//! (wasm-bindgen-cli 0.2.130, the version `sluice-client` is built with). `index.html` loads
//! `pkg/`; serve it with the worker script and the package's worker files as in
//! examples/vite-app (`public/sw.js`, `/sluice/`).

use sluice_client::{ClientError, RegisterOptions, Sluice, Status, WorkerMessage};
use sluice_shared::{JobKind, JobSpec, Lane};
use wasm_bindgen::prelude::*;

/// The demo API on its own origin (`cargo run --release -- --api-port 8081`).
const API: &str = "http://127.0.0.1:8081";
/// The budget the worker script declares for that API.
const BUDGET: &str = "contacts-api";
const IMPORT: &str = "rust-import";

fn create_contact(name: &str, lane: Lane) -> JobSpec {
    JobSpec {
        url: format!("{API}/api/contacts"),
        method: "POST".into(),
        budget: BUDGET.into(),
        lane,
        // A create gets one Idempotency-Key for all its attempts: the API applies it once.
        kind: JobKind::Create,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: Some(serde_json::json!({ "name": name }).to_string()),
        ..JobSpec::default()
    }
}

/// Shows a line on the page (`#log`) and in the console.
fn show(line: &str) {
    web_sys::console::log_1(&line.into());
    let log = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id("log"));
    if let Some(log) = log {
        let text = log.text_content().unwrap_or_default();
        log.set_text_content(Some(&format!("{text}{line}\n")));
    }
}

fn js_error(e: ClientError) -> JsValue {
    JsValue::from_str(&format!("{} ({})", e, e.code()))
}

#[wasm_bindgen(start)]
pub async fn start() -> Result<(), JsValue> {
    let sluice = Sluice::register("/sw.js", RegisterOptions::default())
        .await
        .map_err(js_error)?;

    // Every tab gets the worker's broadcasts; this one lives as long as the page.
    sluice
        .subscribe(|message| match message {
            WorkerMessage::Status { status } => {
                // The status comes as the worker wrote it: read it to look inside.
                let Ok(status) = status.read::<Status>() else {
                    return;
                };
                for group in &status.groups {
                    show(&format!(
                        "{}: {} of {} saved, {} cancelled",
                        group.id, group.done, group.total, group.cancelled
                    ));
                }
            }
            WorkerMessage::Jobs { updates, .. } => {
                for job in updates {
                    show(&format!("job {} is {:?}", job.id, job.state));
                }
            }
            _ => {}
        })
        .forget();

    // Resolves once the worker has stored the job; `done` once the API answered.
    let one = sluice
        .enqueue(create_contact("Ada Lovelace", Lane::Interactive))
        .await
        .map_err(js_error)?;
    match one.done.await {
        Ok(outcome) => show(&format!("contact saved: HTTP {}", outcome.status)),
        Err(end) => show(&format!("contact not saved: {end}")),
    }

    let jobs = (1..=50)
        .map(|i| create_contact(&format!("Imported {i}"), Lane::Bulk))
        .collect();
    let import = sluice
        .enqueue_many(jobs, Some(IMPORT.into()))
        .await
        .map_err(js_error)?;
    show(&format!("import of {} queued", import.ids.len()));
    let cancelled = sluice.cancel(IMPORT).await.map_err(js_error)?;
    show(&format!(
        "import cancelled: {} jobs had not been sent",
        cancelled.len()
    ));
    Ok(())
}
