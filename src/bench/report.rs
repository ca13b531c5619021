//! The targets a run is checked against ([`check_targets`]) and the table for people
//! ([`table`]).

use super::*;

pub(super) fn check_targets(
    bulk: &[BulkResult],
    enqueue: &AckResult,
    interactive: &InteractiveResult,
    cold: &ColdStartResult,
) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    // A bulk run's two targets: no 429 (the limit was told), and how close to it.
    let no_429s = |b: &BulkResult, run: &str| TargetCheck {
        what: format!("bulk, {run}: 429s"),
        target: "0".into(),
        measured: b.rate_limited.to_string(),
        met: b.rate_limited == 0,
    };
    let told_limit =
        |out: &mut Vec<TargetCheck>, b: &BulkResult, run: &str, share: f64, peers: &str| {
            out.push(no_429s(b, run));
            out.push(TargetCheck {
                what: format!("bulk, {run}: share of the limit"),
                target: format!(">= {share} (ordinary limiters: {peers})"),
                measured: format!("{:.3}", b.share_of_limit),
                met: b.share_of_limit >= share,
            });
        };
    if let Some(b) = bulk.iter().find(|b| b.cross_origin) {
        // Relative to what the engine itself reaches on this path (`simulated_ceiling`).
        let ceiling = simulated_ceiling(b.jobs, b.latency_ms);
        let least = ceiling
            .as_ref()
            .map_or(f64::INFINITY, |c| MEDIAN_OF_CEILING * c);
        let target = match &ceiling {
            Ok(c) => format!(">= {least:.3} ({MEDIAN_OF_CEILING} of the engine's {c:.4} here)"),
            Err(e) => format!("the engine's share here, which the simulator could not give: {e}"),
        };
        out.push(no_429s(b, "cross-origin, jitter both ways"));
        out.push(TargetCheck {
            what: "bulk, cross-origin, jitter both ways: share of the limit".into(),
            target: target.clone(),
            measured: format!("{:.3}", b.share_of_limit),
            met: b.share_of_limit >= least,
        });
        if let Some(plain) = b.plain_rate_per_s {
            // The limit is out of reach of any client held to this concurrency when the plain
            // loop does not reach it: then this is the share to read.
            out.push(TargetCheck {
                what: format!(
                    "bulk, cross-origin: share of what {CONCURRENCY} in flight reach here \
                     (plain fetch loop {plain:.1}/s, limit {LIMIT}/s)"
                ),
                target,
                measured: format!("{:.3}", b.share_of_bound),
                met: b.share_of_bound >= least,
            });
        }
        // Without Access-Control-Max-Age the browser keeps a preflight 5 s.
        let allowed = (b.finish_s / 5.0).ceil() as u64 + 1;
        out.push(TargetCheck {
            what: "bulk, cross-origin: CORS preflights".into(),
            target: format!("<= {allowed} (one per 5 s of sending)"),
            measured: b.preflights.to_string(),
            met: b.preflights <= allowed,
        });
    }
    if let Some(b) = bulk.iter().find(|b| b.latency_ms == 30 && !b.cross_origin) {
        told_limit(&mut out, b, "30 ms", 0.97, "0.95");
    }
    for b in bulk {
        let place = if b.cross_origin { ", cross-origin" } else { "" };
        out.push(TargetCheck {
            what: format!(
                "bulk, {} ms{place}: most starts in any window",
                b.latency_ms
            ),
            target: format!("<= {LIMIT}"),
            measured: b.max_in_window.to_string(),
            met: b.max_in_window <= LIMIT as usize,
        });
    }
    let budget = interactive.token_interval_ms + 20.0;
    out.push(TargetCheck {
        what: "interactive start p95".into(),
        target: format!("<= {budget:.0} ms (one token interval + 20 ms)"),
        measured: format!("{:.1} ms", interactive.start.p95_ms),
        met: interactive.start.p95_ms <= budget,
    });
    out.push(TargetCheck {
        what: "cold start to first send".into(),
        target: "<= 200 ms".into(),
        measured: format!("{:.0} ms", cold.first_send_ms),
        met: cold.first_send_ms <= 200.0,
    });
    out.push(TargetCheck {
        what: "enqueue acknowledgement p95".into(),
        target: "<= 10 ms".into(),
        measured: format!("{:.1} ms", enqueue.ack.p95_ms),
        met: enqueue.ack.p95_ms <= 10.0,
    });
    // The target is for 10,000; a quick run saves fewer, so scale the time it is allowed.
    let allowed = 1_000.0 * cold.enqueue_many_jobs as f64 / 10_000.0;
    out.push(TargetCheck {
        what: format!("enqueueMany of {} saved", cold.enqueue_many_jobs),
        target: format!("<= {allowed:.0} ms"),
        measured: format!("{:.0} ms", cold.enqueue_many_ms),
        met: cold.enqueue_many_ms <= allowed,
    });
    out
}

pub(super) fn cpu_text(c: &Option<CpuUse>) -> String {
    match c {
        Some(c) => format!(
            "ours {:.0}%, others {:.0}%",
            c.ours * 100.0,
            c.others * 100.0
        ),
        None => "n/a".into(),
    }
}

/// The report as a table for a terminal.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    let mode = if r.quick { " (quick)" } else { "" };
    s.push_str(&format!(
        "sluice bench{mode}: limit {}/{} ms, {} in flight, {} cores, {:.0} s\n\n",
        r.limit, r.window_ms, r.concurrency, r.cores, r.seconds
    ));
    s.push_str(&format!(
        "{:<34} {:>6} {:>9} {:>9} {:>8} {:>8} {:>5} {:>7} {:>10}  {}\n",
        "bulk",
        "jobs",
        "finish",
        "ideal",
        "share",
        "of bound",
        "429s",
        "max/win",
        "preflights",
        "machine CPU"
    ));
    for b in &r.bulk {
        let place = if b.cross_origin {
            ", cross-origin, jitter"
        } else {
            ""
        };
        s.push_str(&format!(
            "{:<34} {:>6} {:>8.2}s {:>8.2}s {:>8.3} {:>8.3} {:>5} {:>7} {:>10}  {}\n",
            format!("  {} ms latency{place}", b.latency_ms),
            b.jobs,
            b.finish_s,
            b.ideal_s,
            b.share_of_limit,
            b.share_of_bound,
            b.rate_limited,
            b.max_in_window,
            b.preflights,
            cpu_text(&b.cpu)
        ));
    }
    for b in &r.bulk {
        if let Some(plain) = b.plain_rate_per_s {
            s.push_str(&format!(
                "  of bound (cross-origin): over what a plain loop of fetches with {} in flight \
                 reached from the same worker with no limiter: {plain:.1}/s\n",
                r.concurrency
            ));
        }
    }
    s.push('\n');
    s.push_str(&format!(
        "{:<28} {:>6} {:>9} {:>9} {:>9}  {}\n",
        "latency", "n", "p50", "p95", "max", "machine CPU"
    ));
    let row = |name: &str, p: &Percentiles, cpu: &Option<CpuUse>| {
        format!(
            "{:<28} {:>6} {:>7.1}ms {:>7.1}ms {:>7.1}ms  {}\n",
            name,
            p.samples,
            p.p50_ms,
            p.p95_ms,
            p.max_ms,
            cpu_text(cpu)
        )
    };
    s.push_str(&row(
        "  enqueue acknowledged",
        &r.enqueue.ack,
        &r.enqueue.cpu,
    ));
    s.push_str(&row(
        "    with nothing sending",
        &r.enqueue.ack_held_back,
        &r.enqueue.held_back_cpu,
    ));
    s.push_str(&row(
        "  interactive start (bulk)",
        &r.interactive.start,
        &r.interactive.cpu,
    ));
    s.push_str(&row(
        "    of which in first 10 s",
        &r.interactive.start_before_aging,
        &None,
    ));
    s.push('\n');
    let c = &r.cold_start;
    s.push_str(&format!(
        "enqueueMany of {}: saved in {:.0} ms, first send {:.0} ms after that\n",
        c.enqueue_many_jobs, c.enqueue_many_ms, c.first_send_after_ack_ms
    ));
    s.push_str(&format!(
        "cold start holding {} jobs: first send after {:.0} ms, first answer to the page {:.0} ms \
         (empty queue: {:.0} ms)  {}\n",
        c.jobs_held,
        c.first_send_ms,
        c.first_answer_ms,
        c.empty_first_answer_ms,
        cpu_text(&c.cpu)
    ));
    s.push_str(&format!(
        "  woken by a page load holding {} jobs: first send {:.0} ms, first answer {:.0} ms after the navigation began\n",
        c.page_load.jobs_held, c.page_load.first_send_ms, c.page_load.first_answer_ms
    ));
    if c.restarts_after_stop > 0 {
        s.push_str(&format!(
            "  (the browser started the stopped worker again by itself {} time(s); stopped again \
             before measuring)\n",
            c.restarts_after_stop
        ));
    }
    s.push('\n');
    s.push_str("targets\n");
    for t in &r.targets {
        s.push_str(&t.line(40));
    }
    if let Some(p) = &r.peers {
        s.push('\n');
        s.push_str(&peers::table(p));
    }
    s
}
