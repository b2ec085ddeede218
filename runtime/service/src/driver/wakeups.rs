//! Which of the driver's sources woke it (docs/engine.md#cpu-per-notification).
//!
//! Each source (a channel, the intake, the timer, the shutdown signal) is
//! polled with a waker of its own, which marks the source before it wakes
//! the driver's task. A wake-up then polls only the marked sources: a
//! source that said `Pending` holds its waker until it has something, so
//! polling it again before that would only register the waker once more.
//! Every other wake-up used to poll every source, about 2,000 instructions
//! a notification.

use crate::waker_slot::WakerSlot;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// What polling one source gave.
#[derive(Debug)]
pub(super) enum Polled<T> {
    Ready(T),
    /// Nothing yet: the source holds its waker until it has something.
    Waiting,
    /// No source to wait on (a closed channel, a server not started):
    /// polled again at each wake-up, which costs next to nothing.
    Absent,
}

impl<T> Polled<T> {
    /// A channel's `poll_recv`: `None`, a closed channel, is absent.
    pub(super) fn of(polled: Poll<Option<T>>) -> Self {
        match polled {
            Poll::Ready(Some(item)) => Self::Ready(item),
            Poll::Ready(None) => Self::Absent,
            Poll::Pending => Self::Waiting,
        }
    }

    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Polled<U> {
        match self {
            Self::Ready(item) => Polled::Ready(f(item)),
            Self::Waiting => Polled::Waiting,
            Self::Absent => Polled::Absent,
        }
    }
}

impl<T> From<Poll<T>> for Polled<T> {
    fn from(polled: Poll<T>) -> Self {
        match polled {
            Poll::Ready(item) => Self::Ready(item),
            Poll::Pending => Self::Waiting,
        }
    }
}

/// The marks, and the driver task's waker.
#[derive(Debug)]
struct Shared {
    marked: AtomicU32,
    driver: Mutex<WakerSlot>,
}

/// One source's waker: marks it, then wakes the driver.
#[derive(Debug)]
struct Source {
    bit: u32,
    shared: Arc<Shared>,
}

impl Wake for Source {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.marked.fetch_or(self.bit, Ordering::AcqRel);
        self.shared
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wake_by_ref();
    }
}

/// The wakers of `N` sources and which of them woke the driver.
#[derive(Debug)]
pub(super) struct Wakeups<const N: usize> {
    shared: Arc<Shared>,
    wakers: [Waker; N],
}

impl<const N: usize> Wakeups<N> {
    /// Every source marked: each is polled once before any waits.
    pub(super) fn new() -> Self {
        const { assert!(N <= 32, "one bit a source") };
        let shared = Arc::new(Shared {
            marked: AtomicU32::new(u32::MAX),
            driver: Mutex::default(),
        });
        let wakers = std::array::from_fn(|index| {
            Waker::from(Arc::new(Source {
                bit: 1 << index,
                shared: Arc::clone(&shared),
            }))
        });
        Self { shared, wakers }
    }

    /// Polls the marked sources in `order` until one is ready. A source
    /// stays marked unless it is left waiting: one that gave something may
    /// hold more, and the ones after it were not polled.
    pub(super) fn poll<T>(
        &self,
        cx: &Context<'_>,
        order: impl IntoIterator<Item = usize>,
        mut poll: impl FnMut(usize, &mut Context<'_>) -> Polled<T>,
    ) -> Poll<T> {
        let mut marked = self.take(cx);
        let mut keep = 0;
        for index in order {
            let Some(bit) = bit(index) else { continue };
            if marked & bit == 0 {
                continue;
            }
            marked &= !bit;
            match poll(index, &mut self.context(index)) {
                Polled::Ready(item) => {
                    self.keep(keep | bit | marked);
                    return Poll::Ready(item);
                }
                Polled::Absent => keep |= bit,
                Polled::Waiting => {}
            }
        }
        // Marked sources outside `order` stay marked too.
        self.keep(keep | marked);
        Poll::Pending
    }

    fn keep(&self, bits: u32) {
        if bits != 0 {
            self.shared.marked.fetch_or(bits, Ordering::AcqRel);
        }
    }

    /// Keeps `cx`'s waker as the driver's and takes the sources marked
    /// since the last call (bit `i` for source `i`).
    fn take(&self, cx: &Context<'_>) -> u32 {
        self.shared
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keep(cx);
        self.shared.marked.swap(0, Ordering::AcqRel)
    }

    /// Marks source `index` to be polled at the next wake-up (it gave
    /// something, and may hold more, or it was changed).
    pub(super) fn mark(&self, index: usize) {
        if let Some(bit) = bit(index) {
            self.keep(bit);
        }
    }

    /// The context to poll source `index` with.
    fn context(&self, index: usize) -> Context<'_> {
        Context::from_waker(&self.wakers[index % N])
    }
}

/// Source `index`'s bit (`None` past 32 sources).
fn bit(index: usize) -> Option<u32> {
    u32::try_from(index).ok().and_then(|i| 1u32.checked_shl(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the driver's wake-ups.
    struct Driver(AtomicUsize);
    impl Wake for Driver {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_source_woken_is_marked_and_wakes_the_driver_and_a_take_clears_the_marks() {
        let driver = Arc::new(Driver(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&driver));
        let cx = Context::from_waker(&waker);
        let wakeups = Wakeups::<3>::new();
        assert_eq!(wakeups.take(&cx), u32::MAX, "every source at first");
        assert_eq!(wakeups.take(&cx), 0);
        wakeups.context(2).waker().wake_by_ref();
        assert_eq!(driver.0.load(Ordering::SeqCst), 1);
        wakeups.context(0).waker().wake_by_ref();
        assert_eq!(wakeups.take(&cx), 0b101);
        assert_eq!(wakeups.take(&cx), 0);
        wakeups.mark(1);
        assert_eq!(wakeups.take(&cx), 0b010);
        assert_eq!(driver.0.load(Ordering::SeqCst), 2, "a mark wakes nobody");
    }
}
