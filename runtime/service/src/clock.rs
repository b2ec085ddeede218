//! The service's clocks: the monotonic one the engine's timers run on,
//! and the wall clock, watched for jumps (docs/semantics.md#durability-and-replay).

use ruled_engine::{Now, Time};
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
#[derive(Debug)]
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
/// wall clock's jumps against it.
#[derive(Debug)]
pub struct ServiceClock {
    origin: Instant,
    watch: ClockWatch,
}

impl ServiceClock {
    /// Starts the monotonic clock at zero now.
    pub fn start() -> Self {
        let origin = Instant::now();
        let mut clock = Self {
            origin,
            watch: ClockWatch::new(0, 0),
        };
        clock.watch = ClockWatch::new(wall_ms(), clock.mono_ms());
        clock
    }

    /// Now on both clocks.
    pub fn now(&self) -> Now {
        Now::new(Time::from_duration(self.origin.elapsed()), wall_ms())
    }

    /// The instant `time` names on the engine's clock.
    pub fn instant(&self, time: Time) -> Instant {
        self.origin + time.as_duration()
    }

    /// The wall clock's jump since the last check, ms, if there was one.
    pub fn jumped(&mut self) -> Option<i64> {
        let mono_ms = self.mono_ms();
        self.watch.check(wall_ms(), mono_ms)
    }

    fn mono_ms(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX)
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
}
