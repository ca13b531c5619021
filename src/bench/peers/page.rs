//! Running a peer on the peers' page and what the page reports of the run; also used by the
//! real limiters' bench (`limiters.rs`).

use serde::Deserialize;

use super::{PeerFiles, PeerRate, PEERS_PATH};
use crate::bench::{cpu_use, BenchError};
use crate::browser::load::CpuUse;
use crate::browser::{Error, Rig};

/// Opens the peers' page in `rig` (from [`PeerFiles::rig_options`]), waits for its libraries
/// and runs the peer the page calls `name` for `jobs` creates to `api_origin`, told `rate`.
pub(crate) async fn run_on_page(
    rig: &Rig,
    files: &PeerFiles,
    name: &str,
    api_origin: &str,
    jobs: usize,
    rate: &PeerRate,
) -> Result<PageRun, BenchError> {
    let tab = rig.browser.open(&rig.url(PEERS_PATH)).await?;
    let ready = tab
        .eval(
            "const deadline = performance.now() + 10000;\
             while (!window.peersReady) {\
               if (performance.now() > deadline) return false;\
               await new Promise((r) => setTimeout(r, 20));\
             }\
             return true;",
        )
        .await?;
    if ready != serde_json::Value::Bool(true) {
        let log = rig.browser.log();
        let tail = log[log.len().saturating_sub(8)..].join("\n");
        return Err(Error::Page(format!(
            "the peers' page did not load its libraries from {} in 10 s; last log lines:\n{tail}",
            files.node_modules.display()
        ))
        .into());
    }
    let rate_js = serde_json::to_string(rate)
        .map_err(|e| BenchError::Io(format!("the rate for {name}: {e}")))?;
    let cpu = rig.browser.cpu_sample();
    let mut page: PageRun = tab
        .eval_as(&format!(
            "return await window.peers.run('{name}', '{api_origin}', {jobs}, {rate_js});"
        ))
        .await?;
    page.cpu = cpu_use(cpu, rig);
    Ok(page)
}

/// The mean CPU use of the runs that measured it (each from its browser's start to its end,
/// the browser counted as ours).
pub(crate) fn mean_cpu(runs: impl Iterator<Item = Option<CpuUse>>) -> Option<CpuUse> {
    let known: Vec<CpuUse> = runs.flatten().collect();
    if known.is_empty() {
        return None;
    }
    let n = known.len() as f64;
    Some(CpuUse {
        ours: known.iter().map(|c| c.ours).sum::<f64>() / n,
        others: known.iter().map(|c| c.others).sum::<f64>() / n,
    })
}

/// What the page reports of a run.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PageRun {
    /// From handing over the first job to the last one's answer.
    pub page_ms: f64,
    /// The machine's CPU use during the run (measured here, not on the page).
    #[serde(skip)]
    pub cpu: Option<CpuUse>,
}
