//! Local wall-clock time of schedules (docs/rules.md#schedules): the time
//! zone's rules as data ([`LocalZone`], read by the caller from the
//! system's zone database), and when a schedule next fires on that clock.
//! Seconds throughout: `at` and `every` have a resolution of one second.

use rulecore::schedule::{Schedule, DAY_S};

/// A time zone's rules: which UTC offset applies at each instant. Built
/// from a TZif file's bytes or a POSIX `TZ` rule; the engine never reads
/// a file or the environment itself.
#[derive(Debug, Clone)]
pub struct LocalZone {
    zone: tz::TimeZone,
    /// What the caller called it (`Europe/Berlin`, `UTC`), for lines.
    name: String,
}

/// Why a zone could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("time zone `{name}`: not a zone file nor a POSIX TZ rule ({reason})")]
    Invalid { name: String, reason: String },
    #[error("time zone `{name}`: no such zone in the zone database ({reason})")]
    Missing { name: String, reason: String },
}

/// Where the system keeps its zone database.
pub const ZONEINFO_DIRS: &[&str] = &["/usr/share/zoneinfo", "/etc/zoneinfo"];

impl LocalZone {
    pub fn utc() -> Self {
        Self {
            zone: tz::TimeZone::utc(),
            name: "UTC".to_string(),
        }
    }

    /// A zone file's contents (TZif, as in `/usr/share/zoneinfo`).
    pub fn from_tzif(name: &str, bytes: &[u8]) -> Result<Self, ZoneError> {
        let zone = tz::TimeZone::from_tz_data(bytes).map_err(|error| ZoneError::Invalid {
            name: name.to_string(),
            reason: error.to_string(),
        })?;
        Ok(Self {
            zone,
            name: name.to_string(),
        })
    }

    /// A POSIX `TZ` rule such as `CET-1CEST,M3.5.0,M10.5.0/3`, no file read.
    pub fn from_posix_rule(rule: &str) -> Result<Self, ZoneError> {
        let settings = tz::timezone::TimeZoneSettings::new(&[], |_| Err("no files".into()));
        let zone = settings
            .parse_posix_tz(rule)
            .map_err(|error| ZoneError::Invalid {
                name: rule.to_string(),
                reason: error.to_string(),
            })?;
        Ok(Self {
            zone,
            name: rule.to_string(),
        })
    }

    /// The zone `name` as `TZ` names one: `UTC`, a zone database name
    /// (`Europe/Berlin`, its file read by `read` under [`ZONEINFO_DIRS`]),
    /// an absolute path, or a POSIX rule. `read` is the caller's file
    /// access: the engine does no I/O.
    pub fn named(
        name: &str,
        read: impl Fn(&str) -> std::io::Result<Vec<u8>>,
    ) -> Result<Self, ZoneError> {
        let name = name.strip_prefix(':').unwrap_or(name);
        if name.is_empty() || name == "UTC" || name == "Etc/UTC" {
            return Ok(Self::utc());
        }
        let paths: Vec<String> = if name.starts_with('/') {
            vec![name.to_string()]
        } else if name.split('/').any(|part| part == "..") {
            Vec::new()
        } else {
            ZONEINFO_DIRS
                .iter()
                .map(|dir| format!("{dir}/{name}"))
                .collect()
        };
        let mut reason = "not found".to_string();
        for path in &paths {
            match read(path) {
                Ok(bytes) => return Self::from_tzif(name, &bytes),
                Err(error) => reason = format!("{path}: {error}"),
            }
        }
        // Not a file: perhaps a POSIX rule (`CET-1CEST,M3.5.0,M10.5.0/3`).
        Self::from_posix_rule(name).map_err(|_| ZoneError::Missing {
            name: name.to_string(),
            reason,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The UTC offset in seconds at Unix second `unix_s` (0 if the zone
    /// has no answer, which a zone that parsed always has).
    pub fn offset_s(&self, unix_s: i64) -> i64 {
        self.zone
            .find_local_time_type(unix_s)
            .map_or(0, |kind| i64::from(kind.ut_offset()))
    }

    /// The local clock's reading at `unix_s`, in seconds since the local
    /// 1970-01-01T00:00.
    pub fn local_s(&self, unix_s: i64) -> i64 {
        unix_s.saturating_add(self.offset_s(unix_s))
    }

    /// The instant the local clock reads `local_s`. Read twice (a fold,
    /// the clock set back): the first. Never read (a gap, the clock set
    /// forward): the instant it would be on the offset before the gap,
    /// which the clock shows as that much later.
    pub fn resolve(&self, local_s: i64) -> i64 {
        // Offsets a day either side: real zones change at most once in it.
        let before = self.offset_s(local_s.saturating_sub(90_000));
        let after = self.offset_s(local_s.saturating_add(90_000));
        [before, after]
            .into_iter()
            .map(|offset| local_s.saturating_sub(offset))
            .filter(|&unix_s| self.local_s(unix_s) == local_s)
            .min()
            .unwrap_or_else(|| local_s.saturating_sub(before))
    }
}

/// Which of a schedule's keys a fire comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FireKind {
    At,
    Every,
}

impl FireKind {
    pub fn topic(self) -> &'static str {
        match self {
            FireKind::At => rulecore::schedule::AT_TOPIC,
            FireKind::Every => rulecore::schedule::EVERY_TOPIC,
        }
    }

    /// The longest wait between two fires of this key, seconds: a jump
    /// back by more than that starts over from the new clock.
    pub fn longest_gap_s(self, schedule: &Schedule) -> i64 {
        let gap = match self {
            FireKind::At => DAY_S,
            FireKind::Every => schedule.every_s,
        };
        // A DST change can stretch a gap by its size (at most a few hours).
        i64::from(gap) + 3 * 3600
    }
}

/// One fire: when (Unix seconds) and what the local clock was meant to
/// read (seconds after local midnight, `data.at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    pub unix_s: i64,
    pub at_s: u32,
}

/// The first fire of `kind` strictly after `after_s`, `None` when the
/// schedule has no such key.
pub fn next_fire(
    zone: &LocalZone,
    schedule: &Schedule,
    kind: FireKind,
    after_s: i64,
) -> Option<Fire> {
    match kind {
        FireKind::At => next_at(zone, &schedule.at, after_s),
        FireKind::Every => next_every(zone, schedule.every_s, after_s),
    }
}

/// The last fire of `kind` at or before `until_s`.
pub fn last_fire(
    zone: &LocalZone,
    schedule: &Schedule,
    kind: FireKind,
    until_s: i64,
) -> Option<Fire> {
    // Walk forward from further back than the longest gap.
    let mut from = until_s.saturating_sub(kind.longest_gap_s(schedule) + 1);
    if kind == FireKind::Every && schedule.every_s != 0 {
        // On one offset the grid is closed form: no walk for a short period.
        let period = i64::from(schedule.every_s);
        let offset = zone.offset_s(until_s);
        let candidate = until_s - (until_s + offset).rem_euclid(period);
        if zone.offset_s(candidate) == offset && zone.offset_s(candidate + period) == offset {
            from = candidate - 1;
        }
    }
    let mut last = None;
    while let Some(fire) = next_fire(zone, schedule, kind, from) {
        if fire.unix_s > until_s {
            break;
        }
        last = Some(fire);
        from = fire.unix_s;
    }
    last
}

fn next_at(zone: &LocalZone, at: &[u32], after_s: i64) -> Option<Fire> {
    let today = zone.local_s(after_s).div_euclid(i64::from(DAY_S));
    (today - 1..=today + 2)
        .flat_map(|day| at.iter().map(move |&at_s| (day, at_s)))
        .map(|(day, at_s)| Fire {
            unix_s: zone.resolve(day * i64::from(DAY_S) + i64::from(at_s)),
            at_s,
        })
        .filter(|fire| fire.unix_s > after_s)
        .min_by_key(|fire| fire.unix_s)
}

/// The local clock's grid of `every_s`: the instants whose reading is a
/// multiple of the period after local midnight. A reading the clock skips
/// has no fire; one it shows twice fires twice.
fn next_every(zone: &LocalZone, every_s: u32, after_s: i64) -> Option<Fire> {
    if every_s == 0 {
        return None;
    }
    let period = i64::from(every_s);
    let mut from = after_s.saturating_add(1);
    // Each round passes one change of offset; a day has at most a few.
    for _ in 0..8 {
        let offset = zone.offset_s(from);
        let unix_s = from + (-(from + offset)).rem_euclid(period);
        if zone.offset_s(unix_s) == offset {
            let at_s = u32::try_from((unix_s + offset).rem_euclid(i64::from(DAY_S))).unwrap_or(0);
            return Some(Fire { unix_s, at_s });
        }
        // The offset changed before that reading: go on from the change.
        let (mut low, mut high) = (from, unix_s);
        while low < high {
            let mid = low + (high - low) / 2;
            if zone.offset_s(mid) == offset {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        from = low;
    }
    None
}

/// Unix seconds of a civil UTC date and time (proleptic Gregorian).
pub fn unix_of_civil(year: i64, month: u32, day: u32, seconds_of_day: i64) -> i64 {
    // H. Hinnant's days-from-civil.
    let (month, day) = (i64::from(month), i64::from(day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468) * i64::from(DAY_S) + seconds_of_day
}
