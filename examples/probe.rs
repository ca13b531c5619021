// Temporary investigation tool (not to be committed).
use serde_json::json;
use sluice::api::ApiConfig;
use sluice::browser::{Rig, RigOptions};
use std::time::Duration;

const PATCH: &str = r#"
(() => {
  if (self.__probe) return 'already';
  const log = self.__probe = [];
  const now = () => performance.now();
  const of = self.fetch;
  self.fetch = function (req, ...rest) {
    const t0 = now(); log.push(['fetch', t0]);
    const p = of.call(this, req, ...rest);
    p.then(() => log.push(['headers', now()]), () => log.push(['fetchfail', now()]));
    return p;
  };
  const ot = Response.prototype.text;
  Response.prototype.text = function () { const p = ot.call(this); p.then(() => log.push(['body', now()])); return p; };
  const otx = IDBDatabase.prototype.transaction;
  IDBDatabase.prototype.transaction = function (...a) {
    const t = otx.apply(this, a); const t0 = now(); log.push(['tx', t0, String(a[0]), a[1]]);
    t.addEventListener('complete', () => log.push(['txdone', now(), now() - t0]));
    return t;
  };
  const ost = self.setTimeout;
  self.setTimeout = function (f, ms, ...r) { log.push(['arm', now(), ms]); return ost.call(this, (...x) => { log.push(['fire', now()]); return f(...x); }, ms, ...r); };
  const opm = Client.prototype.postMessage;
  Client.prototype.postMessage = function (m, ...r) { log.push(['post', now(), typeof m === 'string' ? m.length : 0]); return opm.call(this, m, ...r); };
  return 'patched';
})()
"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let rig = Rig::start(RigOptions {
        api: ApiConfig {
            limit: 100,
            window_ms: 1000,
            latency_ms: 30,
            seed: Some(1),
            ..ApiConfig::default()
        },
        ..RigOptions::default()
    })
    .await
    .unwrap();
    let tab = rig.open_driver("").await.unwrap();
    tab.eval(&"await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 100, lengthMs: 1000 }], concurrency: CONC, pacing: PACING, matchPrefixes: [location.origin + '/api/'] }] });".replace("PACING", &std::env::var("PACING").unwrap_or("true".into())).replace("CONC", &std::env::var("CONC").unwrap_or("4".into()))).await.unwrap();
    let ws: Vec<String> = rig
        .browser
        .cdp
        .state()
        .workers
        .values()
        .flatten()
        .cloned()
        .collect();
    for s in &ws {
        let r = rig
            .browser
            .cdp
            .call(
                "Runtime.evaluate",
                json!({"expression": PATCH, "returnByValue": true}),
                Some(s),
            )
            .await;
        println!("patch: {r:?}");
    }
    tab.eval(&format!("window.bulkJobs = Array.from({{ length: {n} }}, (_, i) => ({{ url: '/api/contacts', kind: 'create', body: {{ name: 'b ' + i }} }}));")).await.unwrap();
    let ms: f64 = tab.eval_as("const t0 = performance.now(); const r = await sluice.enqueueMany(window.bulkJobs, 'bulk'); await Promise.all(r.ids.map((id) => sluice.done(id))); return performance.now() - t0;").await.unwrap();
    println!("page ms {ms}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for s in &ws {
        let r = rig
            .browser
            .cdp
            .call(
                "Runtime.evaluate",
                json!({"expression": "JSON.stringify(self.__probe)", "returnByValue": true}),
                Some(s),
            )
            .await
            .unwrap();
        std::fs::write(
            "/tmp/probe.json",
            r["result"]["value"].as_str().unwrap_or("[]"),
        )
        .unwrap();
    }
    let st = rig.api.stats();
    println!("{st:?}");
    let a = rig.api.arrivals();
    std::fs::write(
        "/tmp/probe-arrivals.json",
        serde_json::to_string(&a).unwrap(),
    )
    .unwrap();
}
