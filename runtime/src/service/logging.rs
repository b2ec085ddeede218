//! Logging set-up (DESIGN.md 6.9: `--log-level` really filters): a real
//! filter from `--log-level`, plain lines on stderr, and, under systemd
//! (`JOURNAL_STREAM` set), no timestamp (the journal has its own) and a
//! `<N>` syslog priority prefix so `journalctl -p warning` and the
//! journal's colours work.

use std::fmt;
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
        .with_writer(std::io::stderr)
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
        assert_eq!(
            parse_filter("ruled::service=trace").unwrap(),
            "ruled::service=trace"
        );
        for bad in ["verbose", "inf", ""] {
            let error = parse_filter(bad).unwrap_err().to_string();
            assert!(error.contains("not a level"), "{bad}: {error}");
        }
        assert!(parse_filter("ruled=loud").is_err());
    }

    #[test]
    fn priorities_follow_sd_daemon() {
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::TRACE), 7);
    }
}
