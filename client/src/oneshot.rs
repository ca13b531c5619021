//! A single-threaded one-shot channel: the smallest way to hand a reply that arrives in a
//! message event to the future that is waiting for it, without pulling in an async library.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    /// The sender is gone without sending.
    closed: bool,
}

pub struct Sender<T>(Rc<RefCell<Slot<T>>>);

/// Resolves to `Some(value)`, or `None` if the sender was dropped without sending.
pub struct Receiver<T>(Rc<RefCell<Slot<T>>>);

pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
        closed: false,
    }));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    pub fn send(self, value: T) {
        let waker = {
            let mut slot = self.0.borrow_mut();
            slot.value = Some(value);
            slot.waker.take()
        };
        // Waking only schedules the receiver (a microtask in the browser): no user code runs
        // while the caller still holds its own borrows.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let Ok(mut slot) = self.0.try_borrow_mut() else {
                return;
            };
            if slot.value.is_some() {
                return;
            }
            slot.closed = true;
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// The value if it has arrived, without waiting.
    pub fn try_take(&mut self) -> Option<T> {
        self.0.borrow_mut().value.take()
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = self.0.borrow_mut();
        if let Some(v) = slot.value.take() {
            return Poll::Ready(Some(v));
        }
        if slot.closed {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(f).poll(&mut cx)
    }

    #[test]
    fn delivers_a_value_sent_before_or_after_polling() {
        let (tx, mut rx) = channel();
        assert!(poll_once(&mut rx).is_pending());
        tx.send(7);
        assert_eq!(poll_once(&mut rx), Poll::Ready(Some(7)));

        let (tx, mut rx) = channel();
        tx.send("x");
        assert_eq!(poll_once(&mut rx), Poll::Ready(Some("x")));
    }

    #[test]
    fn a_dropped_sender_resolves_to_none() {
        let (tx, mut rx) = channel::<u8>();
        drop(tx);
        assert_eq!(poll_once(&mut rx), Poll::Ready(None));
    }
}
