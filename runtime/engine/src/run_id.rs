//! A run's id, `<rule>#<epoch>-<n>` (docs/semantics.md#durability-and-replay),
//! written into the engine's reused scratch string and allocated once, as
//! the shared string every effect and note of the run holds: starting a
//! run is on the event path (docs/engine.md#the-48-mb-box), and `format!`
//! would allocate twice (and a stack buffer needs a UTF-8 check to become
//! a `str`; appending `str`s to a `String` needs none).

use rulecore::small_str::SmallStr;
use std::sync::Arc;

/// The engine's numbering: jobs, runs and run serials, each counting from
/// 1 for the engine's life (a reload hands them on), and the buffer run
/// ids are written in.
#[derive(Debug)]
pub(crate) struct Ids {
    next_job: u64,
    next_run: u64,
    next_serial: u64,
    scratch: String,
}

impl Default for Ids {
    fn default() -> Self {
        Self {
            next_job: 1,
            next_run: 1,
            next_serial: 1,
            scratch: String::new(),
        }
    }
}

impl Ids {
    pub(crate) fn next_job(&mut self) -> u64 {
        let job = self.next_job;
        self.next_job += 1;
        job
    }

    /// A trace's handle on a run (never reused, unlike a replayed run's id).
    pub(crate) fn next_serial(&mut self) -> u64 {
        let serial = self.next_serial;
        self.next_serial += 1;
        serial
    }

    /// The id of a new run of rule `name`: `<name>#<epoch>-<n>`.
    pub(crate) fn next_run_id(&mut self, name: &str, epoch: &str) -> Arc<str> {
        let n = self.next_run;
        self.next_run += 1;
        run_id(name, epoch, n, &mut self.scratch)
    }
}

/// `<name>#<epoch>-<n>`; `scratch` is only a buffer, left holding the id.
pub(crate) fn run_id(name: &str, epoch: &str, n: u64, scratch: &mut String) -> Arc<str> {
    scratch.clear();
    scratch.push_str(name);
    scratch.push('#');
    scratch.push_str(epoch);
    scratch.push('-');
    let mut digits = [0u8; 20];
    for &digit in decimal(n, &mut digits) {
        scratch.push(char::from(digit));
    }
    Arc::from(scratch.as_str())
}

/// `<ms>-<seq>`, a derived event's id (docs/sources.md), as `format!`
/// would write it; `scratch` is only a buffer, left holding the id.
pub(crate) fn event_id(ms: i64, seq: u64, scratch: &mut String) -> SmallStr {
    scratch.clear();
    if ms < 0 {
        scratch.push('-');
    }
    let mut digits = [0u8; 20];
    for &digit in decimal(ms.unsigned_abs(), &mut digits) {
        scratch.push(char::from(digit));
    }
    scratch.push('-');
    for &digit in decimal(seq, &mut digits) {
        scratch.push(char::from(digit));
    }
    SmallStr::new(scratch)
}

/// `value` in decimal ASCII digits, written at the end of `digits`.
fn decimal(mut value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &digits[start..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_format() {
        let mut scratch = String::from("left over");
        for (name, epoch, n) in [
            ("hazards-on-alarm", "1712345678", 1),
            ("r", "0", 0),
            ("r", "18446744073709551615", u64::MAX),
            ("ünïcode-rule", "42", 1_000_000),
        ] {
            let id = run_id(name, epoch, n, &mut scratch);
            assert_eq!(&*id, format!("{name}#{epoch}-{n}"));
        }
        let long = "x".repeat(200);
        assert_eq!(&*run_id(&long, "7", 9, &mut scratch), format!("{long}#7-9"));
    }

    #[test]
    fn event_ids_read_like_format() {
        let mut scratch = String::from("left over");
        for (ms, seq) in [
            (1_712_345_678_901, 0),
            (0, 0),
            (-5, 3),
            (i64::MIN, u64::MAX),
            (i64::MAX, 10),
        ] {
            let id = event_id(ms, seq, &mut scratch);
            assert_eq!(id.as_str(), format!("{ms}-{seq}"));
        }
    }
}
