//! How busy the machine was with work other than ours during a measurement.
//!
//! Timing figures from a shared two-core machine mean little without this: a compiler or a
//! second browser running beside the measured one slows its timers and its worker. Read from
//! `/proc` (Linux); elsewhere nothing is known and the figures are `None`.

use std::time::Instant;

/// CPU time counters at one instant.
#[derive(Clone, Copy, Debug)]
pub struct CpuSample {
    at: Instant,
    /// Busy time of the whole machine, in clock ticks.
    busy: u64,
    /// Of which our own: this process and the browser's process group.
    ours: u64,
    /// Of which the browser's process group alone.
    browser: u64,
}

/// CPU use between two samples, as shares of the whole machine (1.0 = every core busy).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuUse {
    /// This process (server, driver) and the browser.
    pub ours: f64,
    /// Everything else on the machine.
    pub others: f64,
}

impl CpuSample {
    /// Reads the counters; `browser_group` is the browser's process group id.
    pub fn take(browser_group: Option<u32>) -> Option<CpuSample> {
        let at = Instant::now();
        let busy = machine_busy_ticks()?;
        let browser = browser_group.map_or(0, group_ticks);
        let ours = process_ticks("self").unwrap_or(0) + browser;
        Some(CpuSample {
            at,
            busy,
            ours,
            browser,
        })
    }

    /// CPU time the browser's processes spent from `self` to `later`, in ms (whole clock
    /// ticks, 10 ms each on Linux: read it over runs of seconds).
    pub fn browser_ms_until(&self, later: &CpuSample) -> Option<f64> {
        let hz = clock_ticks_per_second()?;
        Some(later.browser.saturating_sub(self.browser) as f64 / hz * 1000.0)
    }

    /// The use from `self` to `later`.
    pub fn until(&self, later: &CpuSample) -> Option<CpuUse> {
        let secs = later.at.duration_since(self.at).as_secs_f64();
        let hz = clock_ticks_per_second()?;
        let cores = std::thread::available_parallelism().ok()?.get() as f64;
        if secs <= 0.0 {
            return None;
        }
        // Ticks are counted in whole hundredths of a second and the clock is read apart from
        // them, so over a short span the counted ticks can exceed the span: a share is at most
        // the whole machine.
        let capacity = secs * hz * cores;
        let busy = (later.busy.saturating_sub(self.busy) as f64).min(capacity);
        let ours = (later.ours.saturating_sub(self.ours) as f64).min(busy);
        Some(CpuUse {
            ours: ours / capacity,
            others: (busy - ours).max(0.0) / capacity,
        })
    }
}

fn clock_ticks_per_second() -> Option<f64> {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(hz as f64)
}

/// user + nice + system + irq + softirq + steal of the `cpu` line of `/proc/stat`.
fn machine_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let get = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(get(0) + get(1) + get(2) + get(5) + get(6) + get(7))
}

/// (process group, utime + stime) of `/proc/<pid>/stat`.
fn stat_of(pid: &str) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12).
    let pgrp = fields.get(2)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((pgrp, utime + stime))
}

fn process_ticks(pid: &str) -> Option<u64> {
    stat_of(pid).map(|(_, t)| t)
}

fn group_ticks(group: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|pid| stat_of(&pid))
        .filter(|(pgrp, _)| *pgrp == group)
        .map(|(_, t)| t)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine() {
        let Some(a) = CpuSample::take(None) else {
            return; // not Linux
        };
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = CpuSample::take(None).expect("second sample");
        let u = a.until(&b).expect("use");
        assert!((0.0..=1.0).contains(&u.ours), "{u:?}");
        assert!((0.0..=1.0).contains(&u.others), "{u:?}");
    }
}
