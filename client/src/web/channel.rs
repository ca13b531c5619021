//! The page's link to the worker: posting requests (by event, which wakes a stopped worker, or
//! over the page's port), receiving replies and broadcasts, the tick timer, and waiting for the
//! worker to start at registration.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Promise, JSON};
use sluice_shared::json;
use sluice_shared::protocol::{Request, WorkerMessage};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    AddEventListenerOptions, MessageChannel, MessageEvent, MessagePort, ServiceWorkerContainer,
};

use crate::core::{Answer, ClientError, PortState, Received, Via};

use super::convert::{js_message, now};
use super::{snapshot, Inner, Listener};

impl Inner {
    /// Posts to the worker as an event (`postMessage`), which starts a stopped worker; hands it
    /// a new port with it when the page has none.
    pub(super) fn post(&self, text: &str) {
        self.post_offering_port(text, true);
    }

    /// [`Inner::post`], handing over a new port only if `offer_port` (and the page has none).
    pub(super) fn post_offering_port(&self, text: &str, offer_port: bool) {
        if text.is_empty() || self.closed.get() {
            return;
        }
        // No controller means the page is between workers: the next tick resends.
        let target = self
            .container
            .controller()
            .or_else(|| self.registration.active());
        let Some(worker) = target else { return };
        let text = JsValue::from_str(text);
        let offer = offer_port && self.core.borrow_mut().posting_event(now());
        match offer.then(|| self.new_port()).flatten() {
            Some(theirs) => {
                let _ = worker.post_message_with_transferable(&text, &Array::of1(&theirs));
            }
            None => {
                let _ = worker.post_message(&text);
            }
        }
    }

    /// Sends a request the way [`Core::request`] chose (never the port once closed).
    pub(super) fn send(&self, text: &str, via: Via) {
        if via == Via::Port {
            let sent = self
                .port
                .borrow()
                .as_ref()
                .is_some_and(|port| port.post_message(&JsValue::from_str(text)).is_ok());
            if sent {
                self.check_port_answer_soon();
                return;
            }
        }
        self.post(text);
    }

    /// One tick just after a port request is due for its answer (see
    /// [`Timing::port_answer_ms`]): the regular ticks are far too slow for that.
    pub(super) fn check_port_answer_soon(&self) {
        let handlers = self.handlers.borrow();
        let (Some(window), Some(h)) = (web_sys::window(), handlers.as_ref()) else {
            return;
        };
        let ms = self.core.borrow().timing().port_answer_ms + 1.0;
        let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(
            h.tick.as_ref().unchecked_ref(),
            ms as i32,
        );
    }

    /// A new channel: keeps this page's end (closing an older one) and returns the worker's.
    pub(super) fn new_port(&self) -> Option<MessagePort> {
        let channel = MessageChannel::new().ok()?;
        let handlers = self.handlers.borrow();
        let h = handlers.as_ref()?;
        let mine = channel.port1();
        mine.set_onmessage(Some(h.port_message.as_ref().unchecked_ref()));
        self.replace_port(Some(mine));
        Some(channel.port2())
    }

    pub(super) fn replace_port(&self, port: Option<MessagePort>) {
        if let Some(old) = self.port.replace(port) {
            old.set_onmessage(None);
            old.close();
        }
    }

    pub(super) fn on_port_message(&self, event: MessageEvent) {
        self.core.borrow_mut().port_answered();
        self.on_message(event);
    }

    pub(super) fn ensure_timer(&self) {
        if self.timer.get().is_some() || !self.core.borrow().needs_ticks() {
            return;
        }
        let Some(window) = web_sys::window() else {
            return;
        };
        let handlers = self.handlers.borrow();
        let Some(h) = handlers.as_ref() else { return };
        let period = self.core.borrow().timing().tick_ms();
        if let Ok(id) = window.set_interval_with_callback_and_timeout_and_arguments_0(
            h.tick.as_ref().unchecked_ref(),
            period as i32,
        ) {
            self.timer.set(Some(id));
        }
    }

    pub(super) fn stop_timer(&self) {
        if let (Some(id), Some(window)) = (self.timer.take(), web_sys::window()) {
            window.clear_interval_with_handle(id);
        }
    }

    pub(super) fn on_tick(&self) {
        let posts = self.core.borrow_mut().tick(now());
        if self.core.borrow().port_state() == PortState::None {
            // A request sent over the port went unanswered: it is not to be trusted.
            self.replace_port(None);
        }
        for p in &posts {
            self.post(p);
        }
        if !self.core.borrow().needs_ticks() {
            self.stop_timer();
        }
    }

    pub(super) fn on_message(&self, event: MessageEvent) {
        let data = event.data();
        let text = match data.as_string() {
            Some(s) => s,
            None => match JSON::stringify(&data) {
                Ok(s) => s.into(),
                Err(_) => return,
            },
        };
        let received = self.core.borrow_mut().receive(&text, now());
        let posts = self.core.borrow_mut().take_posts();
        for p in &posts {
            self.post(p);
        }
        if received == Received::Broadcast {
            if let Some(fault) = self.core.borrow_mut().take_worker_fault() {
                // Where the person building the page looks, whether or not anyone subscribed.
                web_sys::console::error_1(&format!("sluice: {fault}").into());
                *self.fault.borrow_mut() = Some(fault);
                *self.last_fault.borrow_mut() = Some(text.clone());
                if let Some(end_wait) = self.start_waiter.take() {
                    let _ = end_wait.call0(&JsValue::NULL);
                }
            }
            if text.starts_with("{\"type\":\"status\"") {
                *self.last_status.borrow_mut() = Some(text.clone());
            }
            self.notify(&text, None);
        }
        self.ensure_timer();
    }

    /// Hands a broadcast's text to every subscriber, or to the one with id `only`.
    pub(super) fn notify(&self, text: &str, only: Option<u32>) {
        // Copied out: a listener may subscribe, unsubscribe or call the client.
        let listeners: Vec<Listener> = self
            .listeners
            .borrow()
            .iter()
            .filter(|(id, _)| only.is_none_or(|o| o == *id))
            .map(|(_, l)| l.clone())
            .collect();
        let mut js_value = None;
        for l in listeners {
            match l {
                Listener::Js(f) => {
                    let v =
                        js_value.get_or_insert_with(|| JSON::parse(text).unwrap_or(JsValue::NULL));
                    if let Err(e) = f.call1(&JsValue::NULL, v) {
                        web_sys::console::error_2(&"sluice: a subscriber threw".into(), &e);
                    }
                }
                Listener::Rust(f) => f(text),
            }
        }
    }

    /// A new subscriber hears the last status at once (in a task of its own, as it would hear
    /// a broadcast: never inside the `subscribe` call).
    /// So does the worker's last error told to every page (a new version that cannot start
    /// while this page's worker goes on, say), which came before anyone could listen.
    pub(super) fn replay_status(self: &Rc<Self>, id: u32) {
        let fault = self.last_fault.borrow().clone();
        let status = self.last_status.borrow().clone();
        if fault.is_none() && status.is_none() {
            return;
        }
        let weak = Rc::downgrade(self);
        wasm_bindgen_futures::spawn_local(async move {
            if let Some(inner) = weak.upgrade() {
                for text in fault.iter().chain(status.iter()) {
                    inner.notify(text, Some(id));
                }
            }
        });
    }

    /// Asks the worker for its status with a message event, which starts a stopped worker:
    /// a page that opens must wake a queue with work waiting, whether or not it ever enqueues
    /// (the worker resumes sending as it starts). The answer goes to subscribers as a status.
    pub(super) fn wake_worker(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        wasm_bindgen_futures::spawn_local(async move {
            let Some(inner) = weak.upgrade() else { return };
            // By event alone: a one-off wake needs no channel of its own, and the page's port
            // is made by its first own request, as it was before pages woke the worker.
            let (text, _, pending) = inner.core.borrow_mut().request(Request::Snapshot, now());
            inner.post_offering_port(&text, false);
            inner.ensure_timer();
            let answer = pending.await;
            let Ok(status) = answer.and_then(snapshot) else {
                return;
            };
            let text = json::to_string(&WorkerMessage::Status { status });
            *inner.last_status.borrow_mut() = Some(text.clone());
            inner.notify(&text, None);
        });
    }

    pub(super) fn on_controller_change(&self) {
        self.replace_port(None);
        self.core.borrow_mut().forget_port();
        let posts = self.core.borrow_mut().resend_all(now());
        for p in &posts {
            self.post(p);
        }
    }

    pub(super) fn add_listener(&self, l: Listener) -> u32 {
        let id = self.next_listener.get() + 1;
        self.next_listener.set(id);
        self.listeners.borrow_mut().push((id, l));
        id
    }

    pub(super) fn remove_listener(&self, id: u32) {
        self.listeners.borrow_mut().retain(|(i, _)| *i != id);
    }

    pub(super) async fn request(&self, request: Request) -> Result<Answer, ClientError> {
        let (text, via, pending) = self.core.borrow_mut().request(request, now());
        self.send(&text, via);
        self.ensure_timer();
        pending.await
    }

    pub(super) fn close(&self) {
        if self.closed.replace(true) {
            return;
        }
        self.stop_timer();
        self.core.borrow_mut().close();
        self.replace_port(None);
        self.listeners.borrow_mut().clear();
        if let Some(h) = self.handlers.borrow().as_ref() {
            let _ = self
                .container
                .remove_event_listener_with_callback("message", h.message.as_ref().unchecked_ref());
            let _ = self.container.remove_event_listener_with_callback(
                "controllerchange",
                h.controller_change.as_ref().unchecked_ref(),
            );
        }
    }
}

impl Inner {
    /// Waits until the registration has an active worker (`ready`), the worker says it cannot
    /// start (a message from its entry, see `on_message`), or `timeout_ms` passes; the
    /// registration's `ready` alone never settles when every install fails.
    pub(super) async fn wait_for_start(
        &self,
        container: &ServiceWorkerContainer,
        timeout_ms: f64,
    ) -> Result<(), ClientError> {
        let ready = container
            .ready()
            .map_err(|e| ClientError::Registration(js_message(&e)))?;
        if self.fault.borrow().is_some() {
            return Ok(());
        }
        let timed_out = Rc::new(Cell::new(false));
        let interrupted = Promise::new(&mut |resolve, _reject| {
            *self.start_waiter.borrow_mut() = Some(resolve.clone());
            if let Some(w) = web_sys::window() {
                let flag = timed_out.clone();
                let on_timeout = Closure::once_into_js(move || {
                    flag.set(true);
                    let _ = resolve.call0(&JsValue::NULL);
                });
                let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(
                    on_timeout.unchecked_ref(),
                    timeout_ms as i32,
                );
            }
        });
        let waited = Promise::race(&Array::of2(&ready, &interrupted));
        JsFuture::from(waited)
            .await
            .map_err(|e| ClientError::Registration(js_message(&e)))?;
        self.start_waiter.take();
        if !timed_out.get() || self.fault.borrow().is_some() || self.registration.active().is_some()
        {
            return Ok(());
        }
        let state = if self.registration.installing().is_some() {
            "still installing"
        } else if self.registration.waiting().is_some() {
            "installed but waiting"
        } else {
            "not installed"
        };
        // Whole milliseconds: formatting an `f64` would bring core's float formatting into
        // the page client (about 20 KB of wasm) for this one message.
        let timeout_ms = timeout_ms as u64;
        Err(ClientError::Registration(format!(
            "the service worker did not start within {timeout_ms} ms (controlTimeoutMs): it is \
             {state}. Its console says why (DevTools > Application > Service workers, or \
             chrome://serviceworker-internals); a slow first download may need a longer \
             controlTimeoutMs"
        )))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

pub(super) async fn wait_for_control(container: &ServiceWorkerContainer, timeout_ms: f64) {
    if container.controller().is_some() {
        return;
    }
    let c = container.clone();
    let promise = Promise::new(&mut |resolve, _reject| {
        let opts = AddEventListenerOptions::new();
        opts.set_once(true);
        let _ = c.add_event_listener_with_callback_and_add_event_listener_options(
            "controllerchange",
            &resolve,
            &opts,
        );
        if let Some(w) = web_sys::window() {
            let _ = w
                .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, timeout_ms as i32);
        }
        // It may have happened between the check above and the listener.
        if c.controller().is_some() {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = JsFuture::from(promise).await;
}
