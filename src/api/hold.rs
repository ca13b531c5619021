//! Waits that end when they say: the demo API's arrival holds and answer delays.
//!
//! Why not `tokio::time::sleep`: tokio's timer keeps whole milliseconds, rounds every deadline
//! up to its next tick, and its driver parks for whole milliseconds as well, so each wait came
//! out up to two milliseconds long. A request held on its way there and again for its answer
//! spent about 2.4 ms more at the API than configured (37.1 ms measured for a nominal 35 ms),
//! and a client held to a number of requests in flight was then held back by the test server
//! rather than by what was under test. Here one thread of the process waits on the operating
//! system's high-resolution timer (a condition variable's timed wait, some tens of microseconds
//! late) and wakes each waiting task through a oneshot channel: no spinning, one thread for all
//! servers in the process.
//!
//! Tests that run the API on tokio's paused clock keep tokio's timer ([`Holds::Runtime`]): that
//! clock moves only through it.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

/// Which timer ends the API's waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holds {
    /// The process's precise timer thread: what every server of real requests uses.
    Precise,
    /// tokio's own timer, for tests on its paused clock.
    #[cfg(test)]
    Runtime,
}

impl Holds {
    /// Waits until `deadline`, an instant of tokio's clock (the real one unless paused).
    pub(super) async fn until(self, deadline: tokio::time::Instant) {
        let timer = match self {
            Holds::Precise => PRECISE.as_ref(),
            #[cfg(test)]
            Holds::Runtime => None,
        };
        let Some(timer) = timer else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        let deadline = deadline.into_std();
        if deadline <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        timer.add(deadline, wake);
        // The thread sends once the deadline passed; it drops a sender unsent never.
        let _ = woken.await;
    }
}

/// The timer thread's queue, started with the first precise wait. `None` when the thread could
/// not be started: waits then fall back to tokio's timer, a little long but never wrong.
static PRECISE: LazyLock<Option<&'static PreciseTimer>> = LazyLock::new(|| {
    let timer: &'static PreciseTimer = Box::leak(Box::default());
    match std::thread::Builder::new()
        .name("api-holds".into())
        .spawn(move || timer.run())
    {
        Ok(_) => Some(timer),
        Err(e) => {
            eprintln!("the demo API's timer thread did not start ({e}): waits use tokio's timer");
            None
        }
    }
});

#[derive(Default)]
struct PreciseTimer {
    queue: Mutex<Queue>,
    /// Signalled when a wait is added that ends before all the others.
    earlier: Condvar,
}

#[derive(Default)]
struct Queue {
    waits: BinaryHeap<Reverse<Wait>>,
    /// Orders waits with the same deadline by arrival.
    added: u64,
}

struct Wait {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Wait {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Wait {}

impl PartialOrd for Wait {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wait {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl PreciseTimer {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is plain data: a panic elsewhere while holding it leaves it usable.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, at: Instant, wake: oneshot::Sender<()>) {
        let mut queue = self.lock();
        let first = queue.waits.peek().is_none_or(|Reverse(w)| at < w.at);
        let seq = queue.added;
        queue.added += 1;
        queue.waits.push(Reverse(Wait { at, seq, wake }));
        drop(queue);
        if first {
            self.earlier.notify_one();
        }
    }

    fn run(&self) {
        let mut queue = self.lock();
        loop {
            let now = Instant::now();
            while let Some(Reverse(due)) = queue.waits.peek() {
                if due.at > now {
                    break;
                }
                if let Some(Reverse(due)) = queue.waits.pop() {
                    // A task that gave up (its client went away) dropped its receiver: fine.
                    let _ = due.wake.send(());
                }
            }
            queue = match queue.waits.peek().map(|Reverse(w)| w.at - now) {
                None => self
                    .earlier
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(left) => {
                    self.earlier
                        .wait_timeout(queue, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn precise_waits_end_on_time_and_in_order() {
        let start = tokio::time::Instant::now();
        let mut ends = Vec::new();
        for ms in [30u64, 5, 12, 12, 0] {
            let deadline = start + Duration::from_millis(ms);
            ends.push(tokio::spawn(async move {
                Holds::Precise.until(deadline).await;
                (ms, tokio::time::Instant::now())
            }));
        }
        for end in ends {
            let (ms, at) = end.await.expect("the wait's task ran");
            let took = at - start;
            // Never early; late by far less than tokio's millisecond ticks would make it on an
            // idle machine, but a loaded one may hold the woken task up: only never-early and a
            // loose bound are asserted.
            assert!(
                took >= Duration::from_millis(ms),
                "{ms} ms ended after {took:?}"
            );
            assert!(
                took < Duration::from_millis(ms + 50),
                "{ms} ms ended after {took:?}"
            );
        }
    }
}
