//! The service's clocks: the monotonic one the engine's timers run on,
//! and the wall clock, watched for jumps (docs/semantics.md#durability-and-replay).

use ruled_engine::{Now, Time};
use std::cell::Cell;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The wall clock, Unix milliseconds (0 before 1970).
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Notices a jump of the wall clock against the monotonic one (NTP setting
/// the time, a suspend): timers do not move, but waiting records get their
/// `fire-at` shifted (`Engine::clock_jumped`, docs/service.md "Pending
/// records"). Slewing (NTP's small corrections) stays far below the
/// threshold between two checks.
#[derive(Debug, Clone, Copy)]
struct ClockWatch {
    /// `wall - monotonic` at the last check, ms.
    offset_ms: i64,
}

impl ClockWatch {
    /// A change of the offset by this much between two checks is a jump.
    const JUMP_MS: i64 = 1000;

    fn new(wall_ms: i64, mono_ms: i64) -> Self {
        Self {
            offset_ms: wall_ms.saturating_sub(mono_ms),
        }
    }

    /// The jump since the last check, if there was one.
    fn check(&mut self, wall_ms: i64, mono_ms: i64) -> Option<i64> {
        let offset = wall_ms.saturating_sub(mono_ms);
        let delta = offset.saturating_sub(self.offset_ms);
        (delta.abs() >= Self::JUMP_MS).then(|| {
            self.offset_ms = offset;
            delta
        })
    }
}

/// The engine's monotonic clock (origin: the service's start) and the
/// wall clock's jumps against it: every reading of both clocks
/// ([`ServiceClock::now`]) is also a check for a jump, which
/// [`ServiceClock::jumped`] hands out (the driver reads the clocks at
/// most once per wake-up for both).
#[derive(Debug)]
pub struct ServiceClock {
    origin: Instant,
    watch: Cell<ClockWatch>,
    /// The jumps seen since [`ServiceClock::jumped`] last handed them out.
    jumped_ms: Cell<Option<i64>>,
}

impl ServiceClock {
    /// Starts the monotonic clock at zero now.
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
            // The monotonic clock is at 0 ms now.
            watch: Cell::new(ClockWatch::new(wall_ms(), 0)),
            jumped_ms: Cell::new(None),
        }
    }

    /// Now on both clocks; a jump of the wall clock since the last reading
    /// is kept for [`ServiceClock::jumped`].
    pub fn now(&self) -> Now {
        let mono = self.origin.elapsed();
        let wall = wall_ms();
        let mono_ms = i64::try_from(mono.as_millis()).unwrap_or(i64::MAX);
        self.observe(wall, mono_ms);
        Now::new(Time::from_duration(mono), wall)
    }

    /// The instant `time` names on the engine's clock.
    pub fn instant(&self, time: Time) -> Instant {
        self.origin + time.as_duration()
    }

    /// The wall clock's jump seen by the readings since the last call, if
    /// there was one. Reads no clock: a caller that has not read the time
    /// lately calls [`ServiceClock::now`] first.
    pub fn jumped(&self) -> Option<i64> {
        self.jumped_ms.take()
    }

    fn observe(&self, wall_ms: i64, mono_ms: i64) {
        let mut watch = self.watch.get();
        if let Some(delta) = watch.check(wall_ms, mono_ms) {
            self.watch.set(watch);
            let total = self.jumped_ms.get().unwrap_or(0).saturating_add(delta);
            // Jumps there and back between two hand-outs cancel out.
            self.jumped_ms.set((total != 0).then_some(total));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_watch_sees_jumps_not_drift() {
        let mut watch = ClockWatch::new(1_000_000, 0);
        // Both clocks advance together, or drift by a little: no jump.
        assert_eq!(watch.check(1_010_000, 10_000), None);
        assert_eq!(watch.check(1_020_500, 20_000), None);
        // The wall clock is set an hour ahead, then back.
        assert_eq!(watch.check(4_630_000, 30_000), Some(3_600_000));
        assert_eq!(watch.check(4_640_000, 40_000), None);
        assert_eq!(watch.check(1_050_000, 50_000), Some(-3_600_000));
    }

    #[test]
    fn readings_keep_the_jump_until_it_is_handed_out() {
        let clock = ServiceClock::start();
        clock.watch.set(ClockWatch::new(1_000_000, 0));
        clock.observe(1_010_000, 10_000);
        assert_eq!(clock.jumped(), None);
        // Two readings see two jumps before the driver asks: their sum.
        clock.observe(4_620_000, 20_000);
        clock.observe(4_630_000 + 60_000, 30_000);
        assert_eq!(clock.jumped(), Some(3_660_000));
        assert_eq!(clock.jumped(), None, "handed out once");
        // There and back between two hand-outs: nothing to shift.
        clock.observe(8_240_000, 40_000);
        clock.observe(4_710_000, 50_000);
        assert_eq!(clock.jumped(), None);
    }
}
