//! What a simulated run is judged against: a cell's [`Target`], and the [`Bound`] its share is
//! measured against (the limit, or what the server's windows allow at most on that path).

use super::*;

/// What a matrix cell must achieve. 429s, window peaks, lost and doubled jobs are judged on the
/// worst seed; share and finish time on the median over seeds. Every cell also requires no
/// lost and no doubled jobs.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Most 429s in any one run.
    pub max_429_per_run: Option<u64>,
    /// Least median share of the cell's bound (see [`Bound`]).
    pub min_share: Option<f64>,
    /// No run's arrivals above any real window's limit.
    pub never_above_windows: bool,
    /// Most median finish time over the ideal.
    pub max_finish_over_ideal: Option<f64>,
}

impl Target {
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.never_above_windows {
            parts.push("never above a window".to_string());
        }
        match self.max_429_per_run {
            Some(0) => parts.push("0 429s".into()),
            Some(n) => parts.push(format!("<= {n} 429s/run")),
            None => {}
        }
        if let Some(s) = self.min_share {
            parts.push(format!("share >= {s}"));
        }
        if let Some(f) = self.max_finish_over_ideal {
            parts.push(format!("finish <= {f} ideal"));
        }
        parts.join(", ")
    }
}

/// What a cell's share is a share of: the least of what the server allows us and what the
/// concurrency allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// The server's real limit (whatever the engine was told).
    RealLimit,
    /// The real limit less what other callers spent (measured over the run).
    LeftAfterOthers,
    /// K requests in flight over the mean round trip (latency plus the mean of the jitters).
    Concurrency,
    /// Several windows: the ideal time over the time taken.
    Windows,
}

impl Bound {
    pub(super) fn short(self) -> &'static str {
        match self {
            Bound::RealLimit => "limit",
            Bound::LeftAfterOthers => "left",
            Bound::Concurrency => "K/rtt",
            Bound::Windows => "ideal",
        }
    }
}

/// How a run did against its cell's bound.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgainstBound {
    pub bound: Bound,
    /// Achieved rate while work waited over the bound's rate.
    pub share: f64,
    /// The time the accepted requests take at exactly the bound.
    pub ideal_ms: u64,
    pub finish_over_ideal: f64,
}

/// The share of the bound a run achieved, and which bound it was.
pub fn against_bound(o: &SimulateOptions, r: &Report) -> AgainstBound {
    let accepted = r.requests.saturating_sub(r.rate_limited);
    let (share, bound, ideal_ms) = share_of_bound(o, r);
    let ideal_ms = ideal_ms.unwrap_or(r.ideal_ms);
    AgainstBound {
        bound,
        share,
        ideal_ms,
        finish_over_ideal: if accepted == 0 {
            0.0
        } else {
            r.finished_at_ms as f64 / ideal_ms.max(1) as f64
        },
    }
}

fn share_of_bound(o: &SimulateOptions, r: &Report) -> (f64, Bound, Option<u64>) {
    let real = o.real_windows();
    if real.len() > 1 {
        return (r.share_of_limit, Bound::Windows, None);
    }
    let w = real[0];
    let limit_rate = f64::from(w.limit) / w.length_ms as f64;
    // Others call from the start to the end of the run.
    let others_rate = r.other_arrivals as f64 / r.finished_at_ms.max(1) as f64;
    let (server_rate, server_bound) = if r.other_arrivals > 0 {
        (limit_rate - others_rate, Bound::LeftAfterOthers)
    } else {
        (limit_rate, Bound::RealLimit)
    };
    let concurrency_rate = o.concurrency_rate_per_ms();
    let (allowed, bound) = if concurrency_rate < server_rate {
        (concurrency_rate, Bound::Concurrency)
    } else {
        (server_rate, server_bound)
    };
    let accepted = r.requests.saturating_sub(r.rate_limited);
    if r.busy_ms == 0 || allowed <= 0.0 {
        return (0.0, bound, None);
    }
    let ideal = (accepted.saturating_sub(1) as f64 / allowed) as u64;
    let achieved = accepted as f64 / r.busy_ms as f64;
    (achieved / allowed, bound, Some(ideal))
}
