//! The engine's two clocks (docs/semantics.md): a monotonic [`Time`] for timers
//! and wall-clock Unix milliseconds for pending records' `fire-at`, read
//! together as one [`Now`].

use std::time::Duration;

/// A point on the caller's monotonic clock, in nanoseconds since an
/// arbitrary origin the caller chose (the service: its start `Instant`; the
/// simulator: virtual time zero). Never goes backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis.saturating_mul(1_000_000))
    }
    pub fn from_duration(since_origin: Duration) -> Self {
        Self(u64::try_from(since_origin.as_nanos()).unwrap_or(u64::MAX))
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }
    /// `self + nanos`, saturating (a timer beyond the end of time never fires).
    pub const fn plus_nanos(self, nanos: u64) -> Self {
        Self(self.0.saturating_add(nanos))
    }
    /// Nanoseconds from `earlier` to `self`, 0 if `earlier` is later.
    pub const fn since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// One instant on both clocks: what every time-dependent input of the
/// engine is given. `time` runs the timers; `wall_ms` (Unix milliseconds)
/// dates pending records' `fire-at` and rules' last fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Now {
    pub time: Time,
    pub wall_ms: i64,
}

impl Now {
    pub const fn new(time: Time, wall_ms: i64) -> Self {
        Self { time, wall_ms }
    }
}

/// Nanoseconds to whole milliseconds, rounding up so that a wall-clock
/// `fire-at` is never earlier than the monotonic deadline it mirrors.
pub(crate) fn nanos_to_millis_ceil(nanos: u64) -> i64 {
    i64::try_from(nanos.div_ceil(1_000_000)).unwrap_or(i64::MAX)
}
