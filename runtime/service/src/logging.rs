//! Logging set-up (docs/service.md#flags: `--log-level` really filters): a real
//! filter from `--log-level`, plain lines on stderr, and, under systemd
//! (`JOURNAL_STREAM` set), no timestamp (the journal has its own) and a
//! `<N>` syslog priority prefix so `journalctl -p warning` and the
//! journal's colours work.

use ruled_engine::fast_hash::FastMap;
use std::fmt;
use std::time::{Duration, Instant};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("invalid --log-level `{filter}`: {source}")]
    Filter {
        filter: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error(
        "invalid --log-level `{0}`: not a level; use error, warn, info, debug, trace, off, \
         or directives such as `warn,ruled=debug`"
    )]
    UnknownLevel(String),
    #[error("a logger is already installed")]
    AlreadySet,
}

/// Checks a `--log-level` value and returns the filter to install.
///
/// A bare word must be a level: tracing would read `verbose` or `warning`
/// as "everything from the target named so", which for ruled means no log
/// at all, silently. `warning` (journalctl's spelling) means `warn`.
pub fn parse_filter(text: &str) -> Result<String, LoggingError> {
    let text = text.trim();
    let bare = !text.contains(['=', ',', ':', '[']);
    let filter = match text.to_ascii_lowercase().as_str() {
        "warning" => "warn".to_string(),
        "error" | "warn" | "info" | "debug" | "trace" | "off" => text.to_ascii_lowercase(),
        _ if bare => return Err(LoggingError::UnknownLevel(text.to_string())),
        _ => text.to_string(),
    };
    EnvFilter::try_new(&filter).map_err(|source| LoggingError::Filter {
        filter: text.to_string(),
        source,
    })?;
    Ok(filter)
}

/// Installs the global logger. `filter` is a level (`info`) or tracing
/// directives (`warn,ruled=debug`).
pub fn init(filter: &str) -> Result<(), LoggingError> {
    let filter = parse_filter(filter)?;
    let env_filter = EnvFilter::try_new(&filter).map_err(|source| LoggingError::Filter {
        filter: filter.clone(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(|| EscapingWriter(std::io::stderr()))
        .with_target(false)
        .with_ansi(false);
    let installed = if std::env::var_os("JOURNAL_STREAM").is_some() {
        let inner = tracing_subscriber::fmt::format()
            .with_target(false)
            .with_ansi(false)
            .with_level(false)
            .without_time();
        builder.event_format(Journal { inner }).try_init()
    } else {
        builder.try_init()
    };
    installed.map_err(|_| LoggingError::AlreadySet)
}

/// Writes each log line with every control character in it escaped
/// (docs/service.md#logs): a value that reaches a line (exec stderr, a
/// pending field name, a topic, an error) cannot start a new line, forge a
/// `<0>` journal priority, or move the terminal's cursor.
///
/// The formatter hands over one whole line per write, ending in its `\n`;
/// that last newline is the only control byte kept.
struct EscapingWriter<W>(W);

impl<W: std::io::Write> std::io::Write for EscapingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (body, end) = match buf.split_last() {
            Some((b'\n', body)) => (body, &b"\n"[..]),
            _ => (buf, &b""[..]),
        };
        let mut line = escape_controls(body).into_bytes();
        line.extend_from_slice(end);
        self.0.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// `bytes` as text with C0 and C1 control characters and DEL written as
/// escapes (`\n`, `\t`, `\r`, `\u{1b}`, ...) and bytes that are not UTF-8
/// written as `\xNN`.
pub fn escape_controls(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                    out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// sd-daemon(3) priority of a level.
pub fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// The plain format behind a `<N>` priority prefix and the level's name,
/// unpadded (`<6>INFO ...`, `<7>DEBUG ...`): the prefix already aligns
/// nothing, so padding would only make the lines uneven.
struct Journal {
    inner: Format<Full, ()>,
}

impl<S, N> FormatEvent<S, N> for Journal
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        write!(writer, "<{}>{} ", priority(level), level.as_str())?;
        self.inner.format_event(ctx, writer, event)
    }
}

/// A per-rule log budget, so a burst of events cannot flood the journal
/// (flash on the vehicle) with one line per event: at most
/// [`Throttle::BUDGET`] lines per rule and level in each
/// [`Throttle::WINDOW`]; past it, lines go out at `debug` instead, and when
/// the window closes one line per rule and level says how many were held
/// back. The counters count everything regardless (docs/service.md "Logs").
#[derive(Debug)]
pub struct Throttle {
    started: Instant,
    /// Per rule name (`""`: lines of no rule), per level (error, warn, info).
    seen: FastMap<Box<str>, [Seen; 3]>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    lines: u32,
    held: u32,
}

/// Lines of one rule and level held back in a closed window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// `""`: lines of no rule, or of rules past the key bound.
    pub rule: Box<str>,
    pub level: Level,
    pub lines: u32,
}

const LEVELS: [Level; 3] = [Level::ERROR, Level::WARN, Level::INFO];

impl Throttle {
    pub const WINDOW: Duration = Duration::from_secs(10);
    pub const BUDGET: u32 = 10;
    /// Rules remembered per window; beyond, lines of other rules share the
    /// key `""` (a burst over many rules cannot grow the map).
    const KEYS: usize = 256;

    pub fn new(now: Instant) -> Self {
        Self {
            started: now,
            seen: FastMap::default(),
        }
    }

    /// Whether a line of `rule` at `level` may go out at its level now
    /// (`false`: log it at `debug`). `debug` and `trace` always may. The
    /// caller closes windows with [`Throttle::roll`] (before this, and on a
    /// timer).
    pub fn admit(&mut self, rule: Option<&str>, level: Level) -> bool {
        let Some(slot) = LEVELS.iter().position(|l| *l == level) else {
            return true;
        };
        let rule = self.key(rule);
        let seen = match self.seen.get_mut(rule) {
            Some(seen) => &mut seen[slot],
            None => &mut self.seen.entry(Box::from(rule)).or_default()[slot],
        };
        if seen.lines < Self::BUDGET {
            seen.lines += 1;
            true
        } else {
            seen.held = seen.held.saturating_add(1);
            false
        }
    }

    /// Whether [`Throttle::admit`] would let a line of `rule` at `level`
    /// go out now, without counting it: a caller that need not put a line
    /// into words when it will not show asks this first.
    pub fn has_room(&self, rule: Option<&str>, level: Level) -> bool {
        let Some(slot) = LEVELS.iter().position(|l| *l == level) else {
            return true;
        };
        self.seen
            .get(self.key(rule))
            .is_none_or(|seen| seen[slot].lines < Self::BUDGET)
    }

    /// The key `rule`'s lines count under: `""` for no rule, and for a
    /// rule not seen this window once [`Self::KEYS`] rules were.
    fn key<'a>(&self, rule: Option<&'a str>) -> &'a str {
        let rule = rule.unwrap_or("");
        if !self.seen.contains_key(rule) && self.seen.len() >= Self::KEYS {
            return "";
        }
        rule
    }

    /// Closes the window when it is over, returning what it held back
    /// (sorted by rule, then level, for a stable log).
    pub fn roll(&mut self, now: Instant) -> Vec<Held> {
        if now.saturating_duration_since(self.started) < Self::WINDOW {
            return Vec::new();
        }
        self.started = now;
        let mut held = Vec::new();
        for (rule, seen) in self.seen.drain() {
            for (slot, seen) in seen.iter().enumerate() {
                if seen.held > 0 {
                    held.push(Held {
                        rule: rule.clone(),
                        level: LEVELS[slot],
                        lines: seen.held,
                    });
                }
            }
        }
        held.sort_by(|a, b| a.rule.cmp(&b.rule).then_with(|| b.level.cmp(&a.level)));
        held
    }
}

/// Logs what a closed [`Throttle`] window held back, one line per rule and
/// level, at that level.
pub fn log_held(held: &[Held]) {
    for held in held {
        let (lines, window_s) = (held.lines, Throttle::WINDOW.as_secs());
        // Lines of no rule (undecodable events, ...) have no `rule` field.
        let (rule, message) = if held.rule.is_empty() {
            (None, "more lines held back (shown at debug)")
        } else {
            (
                Some(&held.rule),
                "more lines of this rule held back (shown at debug)",
            )
        };
        let rule = rule.map(tracing::field::display);
        match held.level {
            Level::ERROR => tracing::error!(rule, lines, window_s, "{message}"),
            Level::WARN => tracing::warn!(rule, lines, window_s, "{message}"),
            _ => tracing::info!(rule, lines, window_s, "{message}"),
        }
    }
}

/// `warn_within!(throttle, fields..., "message")`: a `tracing::warn!`
/// within `throttle`'s budget (lines of no rule), else the same line at
/// `debug`; first closes the window if it is over, logging what it held
/// back. For lines about outside input that may come in a flood (a
/// watched field that is not UTF-8, notified thousands of times).
macro_rules! warn_within {
    ($throttle:expr, $($line:tt)+) => {{
        let throttle: &mut $crate::logging::Throttle = $throttle;
        $crate::logging::log_held(&throttle.roll(std::time::Instant::now()));
        if throttle.admit(None, tracing::Level::WARN) {
            tracing::warn!($($line)+);
        } else {
            tracing::debug!($($line)+);
        }
    }};
}
pub(crate) use warn_within;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_are_checked() {
        assert_eq!(parse_filter("info").unwrap(), "info");
        assert_eq!(parse_filter("WARNING").unwrap(), "warn");
        assert_eq!(parse_filter("Debug").unwrap(), "debug");
        assert_eq!(
            parse_filter("warn,ruled=debug").unwrap(),
            "warn,ruled=debug"
        );
        assert_eq!(parse_filter("ruled=trace").unwrap(), "ruled=trace");
        for bad in ["verbose", "inf", ""] {
            let error = parse_filter(bad).unwrap_err().to_string();
            assert!(error.contains("not a level"), "{bad}: {error}");
        }
        assert!(parse_filter("ruled=loud").is_err());
    }

    #[test]
    fn control_characters_are_escaped_but_the_line_end_is_kept() {
        assert_eq!(
            escape_controls(b"a\nb\r<0>x\t\x1b[2J\x7f\xc2\x85\xff"),
            "a\\nb\\r<0>x\\t\\u{1b}[2J\\u{7f}\\u{85}\\xff"
        );
        let mut out = Vec::new();
        let mut writer = EscapingWriter(&mut out);
        std::io::Write::write_all(&mut writer, b"WARN exec said: oops\n<0>forged\n").unwrap();
        assert_eq!(out, b"WARN exec said: oops\\n<0>forged\n");
    }

    #[test]
    fn priorities_follow_sd_daemon() {
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::TRACE), 7);
    }

    #[test]
    fn throttle_holds_lines_past_the_budget_and_reports_them_once() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(t0);
        let (rule, other) = ("burst", "other");
        let admitted = (0..5000)
            .filter(|_| throttle.admit(Some(rule), Level::WARN))
            .count();
        assert_eq!(admitted, Throttle::BUDGET as usize);
        // Another rule, another level: their own budgets.
        assert!(throttle.admit(Some(other), Level::WARN));
        assert!(throttle.admit(Some(rule), Level::INFO));
        assert_eq!(throttle.roll(t0 + Duration::from_secs(1)), vec![]);
        let held = throttle.roll(t0 + Throttle::WINDOW);
        assert_eq!(
            held,
            vec![Held {
                rule: Box::from(rule),
                level: Level::WARN,
                lines: 5000 - Throttle::BUDGET,
            }]
        );
        // A new window: the budget is back, nothing more to report.
        assert!(throttle.admit(Some(rule), Level::WARN));
        assert_eq!(throttle.roll(t0 + Throttle::WINDOW * 2), vec![]);
    }

    #[test]
    fn throttle_keys_are_bounded() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(t0);
        for n in 0..10_000 {
            throttle.admit(Some(&format!("r{n}")), Level::WARN);
        }
        assert!(throttle.seen.len() <= Throttle::KEYS + 1);
    }
}
