//! The one task waiting on a queue, kept under the queue's own lock so
//! that a wait and a push never miss each other (the intake's queue, the
//! bus reader's asks, the driver's [wake-up marks](crate::driver)): no
//! `tokio::sync::Notify` and its waiter list (docs/engine.md#cpu-per-notification).

use std::task::{Context, Waker};

#[derive(Debug, Default)]
pub(crate) struct WakerSlot(Option<Waker>);

impl WakerSlot {
    /// Keeps `cx`'s waker; the one kept already when it wakes the same
    /// task (no clone, the common case).
    pub(crate) fn keep(&mut self, cx: &Context<'_>) {
        match &self.0 {
            Some(kept) if kept.will_wake(cx.waker()) => {}
            _ => self.0 = Some(cx.waker().clone()),
        }
    }

    /// The waker kept, taken: woken once the lock is released.
    pub(crate) fn take(&mut self) -> Option<Waker> {
        self.0.take()
    }

    /// Wakes the task kept, keeping it for the next time.
    pub(crate) fn wake_by_ref(&self) {
        if let Some(kept) = &self.0 {
            kept.wake_by_ref();
        }
    }
}
