//! CPU profiles of the running service worker's thread and the pages', through the DevTools protocol's
//! `Profiler` domain: where the worker's own time goes (`sluice bench --ceiling --profile`).
//!
//! The profile is saved as Chrome's `.cpuprofile` JSON (DevTools' Performance panel and
//! speedscope open it) and summarized here as the functions with the most self time. Wasm
//! functions have their names only in a build with `SLUICE_WASM_NAMES=1`.

use super::{Browser, Error};
use serde_json::{json, Value};
use std::collections::HashMap;

/// How often the profiler samples, in microseconds: fine enough for requests of ~1 ms.
const SAMPLING_INTERVAL_US: u32 = 100;

/// A function's share of the profile.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTime {
    /// `name (file:line)`, or what V8 calls its own entries (`(garbage collector)`, `(idle)`,
    /// `(program)`).
    pub function: String,
    pub ms: f64,
}

/// A thread being profiled: the service worker's or a page's.
pub struct ProfiledThread {
    /// `worker` or `page`.
    pub label: &'static str,
    session: String,
}

impl Browser {
    /// Starts sampling the threads of the running service worker and of every page.
    pub async fn start_profiles(&self) -> Result<Vec<ProfiledThread>, Error> {
        let threads: Vec<ProfiledThread> = {
            let st = self.cdp.state();
            let workers = st.workers.values().flatten().map(|s| ("worker", s));
            let pages = st.pages.values().flatten().map(|s| ("page", s));
            workers
                .chain(pages)
                .map(|(label, session)| ProfiledThread {
                    label,
                    session: session.clone(),
                })
                .collect()
        };
        if !threads.iter().any(|t| t.label == "worker") {
            return Err(Error::Cdp("no service worker is attached".into()));
        }
        for thread in &threads {
            for (method, params) in [
                ("Profiler.enable", json!({})),
                (
                    "Profiler.setSamplingInterval",
                    json!({ "interval": SAMPLING_INTERVAL_US }),
                ),
                ("Profiler.start", json!({})),
            ] {
                self.cdp
                    .call(method, params, Some(&thread.session))
                    .await
                    .map_err(Error::Cdp)?;
            }
        }
        Ok(threads)
    }

    /// Stops the profile [`Browser::start_profiles`] began on `thread` and returns it (a
    /// `.cpuprofile` document).
    pub async fn stop_profile(&self, thread: &ProfiledThread) -> Result<Value, Error> {
        let reply = self
            .cdp
            .call("Profiler.stop", json!({}), Some(&thread.session))
            .await
            .map_err(Error::Cdp)?;
        Ok(reply["profile"].clone())
    }
}

/// The `top` functions of a `.cpuprofile` by self time (a sample's time goes to the function
/// running when it was taken), with the profile's whole length as the last entry, `(total)`.
pub fn self_times(profile: &Value, top: usize) -> Vec<SelfTime> {
    let mut name_of = HashMap::new();
    for node in profile["nodes"].as_array().into_iter().flatten() {
        let frame = &node["callFrame"];
        let name = frame["functionName"].as_str().unwrap_or("");
        let url = frame["url"].as_str().unwrap_or("");
        let file = url.rsplit('/').next().unwrap_or(url);
        let function = match (name.is_empty(), file.is_empty()) {
            (_, true) if name.starts_with('(') => name.to_string(),
            (true, _) => format!("(anonymous) ({file}:{})", frame["lineNumber"]),
            (false, true) => name.to_string(),
            (false, false) => format!("{name} ({file})"),
        };
        name_of.insert(node["id"].as_u64().unwrap_or(0), function);
    }
    let samples = profile["samples"].as_array().into_iter().flatten();
    let deltas = profile["timeDeltas"].as_array().into_iter().flatten();
    let mut by_function: HashMap<&str, f64> = HashMap::new();
    let mut total_us = 0.0;
    // A sample's delta is the time since the previous one: it belongs to this sample's node.
    for (sample, delta) in samples.zip(deltas) {
        let us = delta.as_f64().unwrap_or(0.0);
        total_us += us;
        let name = sample
            .as_u64()
            .and_then(|id| name_of.get(&id))
            .map_or("(unknown)", String::as_str);
        *by_function.entry(name).or_default() += us;
    }
    let mut out: Vec<SelfTime> = by_function
        .into_iter()
        .map(|(function, us)| SelfTime {
            function: function.to_string(),
            ms: us / 1000.0,
        })
        .collect();
    out.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    out.truncate(top);
    out.push(SelfTime {
        function: "(total)".into(),
        ms: total_us / 1000.0,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_time_goes_to_the_sampled_node() {
        let profile = json!({
            "nodes": [
                { "id": 1, "callFrame": { "functionName": "(root)", "url": "", "lineNumber": -1 } },
                { "id": 2, "callFrame": { "functionName": "save", "url": "http://x/sw.js", "lineNumber": 3 } },
                { "id": 3, "callFrame": { "functionName": "(idle)", "url": "", "lineNumber": -1 } },
            ],
            "samples": [2, 3, 2, 2],
            "timeDeltas": [200, 1000, 300, 600],
        });
        let top = self_times(&profile, 5);
        assert_eq!(top[0].function, "save (sw.js)");
        assert!((top[0].ms - 1.1).abs() < 1e-9);
        assert_eq!(
            top[1],
            SelfTime {
                function: "(idle)".into(),
                ms: 1.0
            }
        );
        assert!((top[2].ms - 2.1).abs() < 1e-9, "{top:?}");
    }
}
