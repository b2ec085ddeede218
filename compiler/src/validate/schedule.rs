//! `at` and `every` (docs/rules.md#schedules): a rule's own fires at times
//! of the local day and on a grid aligned to local midnight.

use super::checker::{entry, RuleChecker};
use crate::diagnostic::Code;
use crate::rulefile::Table;
use rulecore::schedule::{parse_time_of_day, Schedule, DAY_S};
use toml::de::DeValue;

/// At most this many `at` times per rule.
pub const MAX_AT_TIMES: usize = 64;

impl<'i> RuleChecker<'_, 'i> {
    /// The rule's schedule (empty when it has neither key); `None` on an
    /// error, each reported.
    pub(super) fn schedule(&mut self, table: &Table<'i>) -> Option<Schedule> {
        let at = self.at_times(table);
        let every_s = self.every_period(table);
        Some(Schedule {
            at: at?.into(),
            every_s: every_s?,
        })
    }

    fn at_times(&mut self, table: &Table<'i>) -> Option<Vec<u32>> {
        let Some(e) = entry(table, "at") else {
            return Some(Vec::new());
        };
        let DeValue::Array(items) = e.value.get_ref() else {
            let help = matches!(e.value.get_ref(), DeValue::String(_))
                .then_some("write a list, even for one time: `at = [\"22:00\"]`");
            self.wrong_type("at", e.value, "an array of times of day", help);
            return None;
        };
        if items.is_empty() || items.len() > MAX_AT_TIMES {
            self.error_help(
                Code::Schedule,
                format!(
                    "`at` lists {} times; write 1 to {MAX_AT_TIMES}",
                    items.len()
                ),
                e.value.span(),
                "times of day",
                "list the local times the rule fires at, e.g. `at = [\"22:00\", \"06:30:15\"]`",
            );
            return None;
        }
        let mut times = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items.iter() {
            let DeValue::String(text) = item.get_ref() else {
                self.wrong_type(
                    "at",
                    item,
                    "a time of day string",
                    Some("write `\"22:00\"`"),
                );
                ok = false;
                continue;
            };
            match parse_time_of_day(text) {
                Ok(seconds) => times.push(seconds),
                Err(error) => {
                    self.error_help(
                        Code::Schedule,
                        error.to_string(),
                        item.span(),
                        "not a time of day",
                        "write the local time as `HH:MM` or `HH:MM:SS`, e.g. `\"06:30\"`",
                    );
                    ok = false;
                }
            }
        }
        times.sort_unstable();
        times.dedup();
        ok.then_some(times)
    }

    fn every_period(&mut self, table: &Table<'i>) -> Option<u32> {
        let help = "write a period that divides a day, such as `\"5m\"`, `\"1h\"` or `\"2s\"`";
        let nanos = self.bounded_duration(table, "every", true, help).ok()?;
        let Some(nanos) = nanos else {
            return Some(0);
        };
        let divides = nanos % 1_000_000_000 == 0
            && nanos / 1_000_000_000 <= u64::from(DAY_S)
            && u64::from(DAY_S) % (nanos / 1_000_000_000) == 0;
        if !divides {
            let span = entry(table, "every")
                .map(|e| e.value.span())
                .unwrap_or_default();
            self.error_help(
                Code::Schedule,
                "`every` must be a whole number of seconds that divides a day".to_string(),
                span,
                "not a divisor of 24h",
                help,
            );
            return None;
        }
        u32::try_from(nanos / 1_000_000_000).ok()
    }
}
