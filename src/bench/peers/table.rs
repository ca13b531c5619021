//! The peer comparison as a table for a terminal.

use super::PeersReport;

fn list<T: ToString>(values: impl Iterator<Item = T>) -> String {
    values.map(|v| v.to_string()).collect::<Vec<_>>().join(" ")
}

/// The comparison as a table for a terminal.
pub fn table(p: &PeersReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "peers: {} creates per run, {} runs each, limit {}/{} ms at arrival, {} in flight, \
         {} ms latency, cross-origin, jitter 0..{} ms arriving and ±{} ms answering; {:.0} s",
        p.jobs,
        p.runs_per_client,
        p.limit,
        p.window_ms,
        p.concurrency,
        p.latency_ms,
        p.arrival_jitter_ms,
        p.answer_jitter_ms,
        p.seconds
    ));
    if let Some(c) = &p.cpu {
        s.push_str(&format!(
            "; machine CPU during the runs: ours {:.0}%, others {:.0}%",
            c.ours * 100.0,
            c.others * 100.0
        ));
    }
    s.push('\n');
    s.push_str(&format!(
        "{:<18} {:>6} {:>13}  {:<20} {:<16} {:<26} {:<30} {}\n",
        "client",
        "share",
        "spread",
        "429s per run",
        "preflights",
        "requests sent",
        "finish (s)",
        "others' CPU"
    ));
    for c in &p.clients {
        s.push_str(&format!(
            "{:<18} {:>6.3} {:>13}  {:<20} {:<16} {:<26} {:<30} {}\n",
            c.label,
            c.share_of_limit.median,
            format!("{:.3}-{:.3}", c.share_of_limit.min, c.share_of_limit.max),
            list(c.runs.iter().map(|r| r.rate_limited)),
            list(c.runs.iter().map(|r| r.preflights)),
            list(c.runs.iter().map(|r| r.requests)),
            list(c.runs.iter().map(|r| format!("{:.2}", r.finish_s))),
            c.cpu
                .map_or("n/a".into(), |u| format!("{:.0}%", u.others * 100.0)),
        ));
    }
    s.push_str(
        "share: creates per second over the limit, first arrival to the last answer (median of \
         the runs; spread: lowest-highest); lists are per run\n",
    );
    for c in &p.clients {
        s.push_str(&format!("  {}: {}\n", c.label, c.settings));
    }
    for r in &p.ratios {
        s.push_str(&format!(
            "sluice's median share over {}'s: {:.3}{}\n",
            r.peer,
            r.ratio,
            if r.kept_the_limit {
                ""
            } else {
                " (a peer that drew 429s: part of its share the API refused first)"
            }
        ));
    }
    for t in &p.targets {
        s.push_str(&t.line(52));
    }
    s
}
