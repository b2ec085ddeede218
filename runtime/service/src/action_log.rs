//! The journal's line for each action handed to the pool
//! (docs/service.md#logs): at `info`, through the per-rule [`Throttle`],
//! the rule, the step and what runs, as an operator would type it:
//! `LPUSH scooter:blinker both`, `PUBLISH channel message`, `exec COMMAND`,
//! `CAN can0 123#DEADBEEF` (cansend's notation). Past the budget the line
//! goes out at `debug`, as every throttled line does.

use crate::logging::{self, Throttle};
use rulecore::bundle::{Action, CanFrame};
use ruled_engine::Job;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

/// How much of a pushed or published value the line shows.
const VALUE_CHARS: usize = 120;

/// The line of one job, made before the job is handed to the pool (which
/// owns it then) and logged once the pool took it; a guarded job's once
/// it starts, past its guards (the driver holds it until then).
#[derive(Debug)]
pub struct ActionLine {
    rule: Arc<str>,
    run: Arc<str>,
    step: u32,
    pass: u32,
    finally: bool,
    /// `None` when the line will not show (past the rule's budget at `info`
    /// with `debug` off, or `info` off): not put into words for nothing.
    what: Option<String>,
}

impl ActionLine {
    /// The line of `job`; `throttle`'s window is rolled here (what it held
    /// back logged), so that it still holds when the line is logged.
    pub fn of(job: &Job, throttle: &mut Throttle) -> Self {
        logging::log_held(&throttle.roll(Instant::now()));
        let shown = (tracing::enabled!(tracing::Level::INFO)
            && throttle.has_room(Some(&job.rule), tracing::Level::INFO))
            || tracing::enabled!(tracing::Level::DEBUG);
        Self {
            rule: Arc::clone(&job.rule),
            run: Arc::clone(&job.run),
            step: job.step,
            pass: job.pass,
            finally: job.finally(),
            what: shown.then(|| what(job.performed())),
        }
    }

    /// Logs it at `info`, or at `debug` past the rule's budget (counted
    /// there either way).
    pub fn log(&self, throttle: &mut Throttle) {
        let Self {
            rule,
            run,
            step,
            pass,
            finally,
            what,
        } = self;
        // `finally` only on a finally step's line (docs/semantics.md#finally).
        let finally = finally.then_some(true);
        let what = what.as_deref().unwrap_or_default();
        if throttle.admit(Some(rule), tracing::Level::INFO) {
            tracing::info!(rule = %rule, step, finally, pass, run = %run, "action: {what}");
        } else {
            tracing::debug!(rule = %rule, step, finally, pass, run = %run, "action: {what}");
        }
    }
}

/// What an action does, in one line.
pub fn what(action: &Action) -> String {
    match action {
        Action::Redis { list, push, .. } => {
            format!("LPUSH {} {}", word(list), value(push.source()))
        }
        Action::Publish {
            channel, message, ..
        } => format!("PUBLISH {} {}", word(channel), value(message.source())),
        Action::Exec { command, .. } => format!("exec {}", word(command)),
        Action::Can(frame) => format!("CAN {}", can(frame)),
        // Submitted as the publish of its JSON; said so if one is not.
        Action::Notify(notification) => format!(
            "notify {} {}",
            word(&notification.id),
            value(notification.title.source())
        ),
    }
}

/// A frame as `cansend` takes it: `can0 123#DEADBEEF`, `can0 12345678#R4`.
fn can(frame: &CanFrame) -> String {
    let mut text = format!("{} ", word(&frame.iface));
    // Writing to a String cannot fail.
    let _ = if frame.extended {
        write!(text, "{:08X}#", frame.id)
    } else {
        write!(text, "{:03X}#", frame.id)
    };
    if frame.rtr {
        text.push('R');
        if frame.dlc > 0 {
            let _ = write!(text, "{}", frame.dlc);
        }
    } else {
        for byte in &frame.data {
            let _ = write!(text, "{byte:02X}");
        }
    }
    text
}

/// A value cut to [`VALUE_CHARS`] characters, quoted when it has to be.
fn value(text: &str) -> String {
    let count = text.chars().count();
    if count <= VALUE_CHARS {
        return word(text);
    }
    let cut: String = text.chars().take(VALUE_CHARS).collect();
    format!("{}... ({count} characters)", word(&cut))
}

/// `text` as it is when it reads as one word, else quoted with escapes, so
/// a line break or a space in a value cannot forge or blur a journal line.
fn word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| (c.is_ascii_graphic() && c != '"' && c != '\\') || c.is_alphanumeric());
    if plain {
        text.to_string()
    } else {
        format!("{text:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_as_an_operator_would_type_it() {
        assert_eq!(
            what(&Action::redis("scooter:blinker", "both")),
            "LPUSH scooter:blinker both"
        );
        let exec = Action::Exec {
            command: "/usr/bin/true".into(),
            timeout_ns: 1,
        };
        assert_eq!(what(&exec), "exec /usr/bin/true");
        let frame = |id, extended, rtr, dlc, data: &[u8]| {
            Action::Can(CanFrame {
                iface: "can0".into(),
                id,
                extended,
                rtr,
                dlc,
                data: data.to_vec(),
            })
        };
        assert_eq!(
            what(&frame(0x123, false, false, 4, &[0xDE, 0xAD, 0xBE, 0xEF])),
            "CAN can0 123#DEADBEEF"
        );
        assert_eq!(
            what(&frame(0x1234_5678, true, true, 4, &[])),
            "CAN can0 12345678#R4"
        );
    }

    #[test]
    fn odd_values_are_quoted_and_long_ones_cut() {
        assert_eq!(
            what(&Action::redis("l", "two words\nand a line")),
            r#"LPUSH l "two words\nand a line""#
        );
        assert_eq!(what(&Action::redis("l", "")), r#"LPUSH l """#);
        let long = "x".repeat(500);
        assert_eq!(
            what(&Action::redis("l", long.as_str())),
            format!("LPUSH l {}... (500 characters)", "x".repeat(VALUE_CHARS))
        );
    }
}
