//! Time as the engine sees it.
//!
//! The engine never reads a clock: every call that depends on time takes `now` as an argument.
//! Times are wall-clock milliseconds since the Unix epoch because they are persisted: a pause
//! until 12:00:05 or a start recorded at 12:00:01 must keep meaning the same instant after the
//! browser stops and restarts the worker, which a monotonic per-process clock would not.

/// Milliseconds since the Unix epoch (or, in simulations, since any fixed origin).
pub type Millis = u64;

/// A duration in milliseconds.
pub type DurationMs = u64;

/// Formats a duration for people: "45 s", "3 min 20 s", "1 h 12 min".
pub fn human_duration(ms: DurationMs) -> String {
    let total_s = ms.div_ceil(1000);
    let (h, m, s) = (total_s / 3600, (total_s % 3600) / 60, total_s % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s} s"),
        (0, m, 0) => format!("{m} min"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, 0, _) => format!("{h} h"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_round_up_to_the_second() {
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(1), "1 s");
        assert_eq!(human_duration(45_000), "45 s");
        assert_eq!(human_duration(200_000), "3 min 20 s");
        assert_eq!(human_duration(180_000), "3 min");
        assert_eq!(human_duration(4_320_000), "1 h 12 min");
        assert_eq!(human_duration(7_200_000), "2 h");
    }
}
