//! A rule's schedule (docs/rules.md#schedules): `at` times of the local day
//! and an `every` period aligned to local midnight, as the bundle carries
//! them, and the one spelling of a time of day both halves share.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Seconds in a day: an `every` period divides it.
pub const DAY_S: u32 = 86_400;

/// Topic of a fire of an `at` time.
pub const AT_TOPIC: &str = "time.at";
/// Topic of a fire of an `every` period.
pub const EVERY_TOPIC: &str = "time.every";

/// `at` and `every` of one rule. Empty `at` and `every_s == 0`: no schedule.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Schedule {
    /// Seconds after local midnight, ascending, without repeats.
    pub at: Box<[u32]>,
    /// Seconds, a divisor of a day; 0: none.
    pub every_s: u32,
}

impl Schedule {
    pub fn is_empty(&self) -> bool {
        self.at.is_empty() && self.every_s == 0
    }
}

/// What is wrong with a written time of day.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeOfDayError {
    #[error("`{0}` is not a time of day: write `HH:MM` or `HH:MM:SS`, 24-hour clock")]
    Shape(String),
    #[error("`{0}` is out of range: hours 00-23, minutes and seconds 00-59")]
    Range(String),
}

/// Parses `HH:MM` or `HH:MM:SS` (two digits each) into seconds after midnight.
pub fn parse_time_of_day(text: &str) -> Result<u32, TimeOfDayError> {
    let parts: Vec<&str> = text.split(':').collect();
    let two_digits = |part: &&str| part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit());
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(two_digits) {
        return Err(TimeOfDayError::Shape(text.to_string()));
    }
    let mut values = [0u32; 3];
    for (value, part) in values.iter_mut().zip(&parts) {
        *value = part
            .parse()
            .map_err(|_| TimeOfDayError::Shape(text.to_string()))?;
    }
    let [h, m, s] = values;
    if h > 23 || m > 59 || s > 59 {
        return Err(TimeOfDayError::Range(text.to_string()));
    }
    Ok(h * 3600 + m * 60 + s)
}

/// Seconds after midnight as a fire's `data.at`: `HH:MM`, or `HH:MM:SS`
/// when the seconds are not zero.
pub fn time_of_day_label(seconds: u32) -> String {
    let seconds = seconds % DAY_S;
    let mut out = String::with_capacity(8);
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let _ = write!(out, "{h:02}:{m:02}");
    if s != 0 {
        let _ = write!(out, ":{s:02}");
    }
    out
}

/// The event of one fire: `{topic, src: "schedule", ts, data: {at}}`,
/// `at` the scheduled local time (`HH:MM[:SS]`), `ts` the wall clock's
/// Unix ms when it fired. The one place such an event is built.
pub fn fire_event(topic: &str, at_label: &str, ts_ms: i64) -> crate::event::Event {
    use crate::event_data::DataValue;
    crate::event::Event {
        topic: topic.into(),
        src: Some("schedule".into()),
        ts: Some(ts_ms),
        data: DataValue::object([("at", DataValue::Str(at_label.into()))]),
        ..crate::event::Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_parse_and_print() {
        assert_eq!(parse_time_of_day("22:00"), Ok(79_200));
        assert_eq!(parse_time_of_day("06:30:15"), Ok(23_415));
        assert_eq!(parse_time_of_day("00:00"), Ok(0));
        assert!(matches!(
            parse_time_of_day("24:00"),
            Err(TimeOfDayError::Range(_))
        ));
        assert!(matches!(
            parse_time_of_day("7:00"),
            Err(TimeOfDayError::Shape(_))
        ));
        assert!(matches!(
            parse_time_of_day("07:00:00:00"),
            Err(TimeOfDayError::Shape(_))
        ));
        assert!(matches!(
            parse_time_of_day("07:6x"),
            Err(TimeOfDayError::Shape(_))
        ));
        assert_eq!(time_of_day_label(79_200), "22:00");
        assert_eq!(time_of_day_label(23_415), "06:30:15");
    }
}
