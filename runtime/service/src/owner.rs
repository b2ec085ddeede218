//! Who writes the counters hash (docs/service.md#key-namespace): ruled marks
//! `NS` with `state`, `pid`, `host` and `started-at` at start and `state =
//! stopped` at an orderly stop, and before that looks at what the hash says
//! to warn about another live writer on the same namespace.

use crate::connection::{describe, query};
use crate::namespace::Namespace;
use redis::aio::ConnectionManager;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// The `state` field while ruled runs, and after an orderly stop.
pub const RUNNING: &str = "running";
pub const STOPPED: &str = "stopped";

/// This process, as the counters hash names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub host: String,
    /// Unix milliseconds.
    pub started_at_ms: i64,
}

impl Owner {
    /// This process, started now.
    pub fn current() -> Self {
        let host = nix::unistd::gethostname()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|e| {
                tracing::warn!("cannot read the host name ({e}); `host` says `unknown`");
                "unknown".to_string()
            });
        Self {
            pid: std::process::id(),
            host,
            started_at_ms: crate::clock::wall_ms(),
        }
    }

    /// The fields that mark the hash as this process's, `state = running`
    /// first.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("state", RUNNING.to_string()),
            ("pid", self.pid.to_string()),
            ("host", self.host.clone()),
            ("started-at", self.started_at_ms.to_string()),
        ]
    }
}

/// What the counters hash said at start about another writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collision {
    /// `state = running` under another pid or host, touched `idle_s` ago
    /// (`None`: Redis does not track it), within two stats intervals.
    LiveRuled {
        pid: String,
        host: String,
        idle_s: Option<u64>,
    },
    /// Fields ruled never writes: another program writes this hash.
    ForeignFields(Vec<String>),
}

/// What the hash held, read before ruled writes its own fields.
#[derive(Debug, Default)]
pub struct Found {
    pub fields: HashMap<String, String>,
    /// Seconds since the key was last touched (`OBJECT IDLETIME`); `None`
    /// when Redis does not say (an LFU eviction policy).
    pub idle_s: Option<u64>,
}

/// Reads the counters hash as it stands. An error reply (not a hash; the
/// user may not run `OBJECT`) is logged and read as empty: the check is a
/// warning, it never stops a start. Only a lost connection is an error.
pub async fn read(con: &mut ConnectionManager, namespace: &Namespace) -> redis::RedisResult<Found> {
    let key = namespace.counters();
    // Before the read: `HGETALL` itself would reset the idle time.
    let idle: redis::RedisResult<Option<u64>> =
        query(con, redis::cmd("OBJECT").arg("IDLETIME").arg(key)).await;
    let idle_s = match idle {
        Ok(idle) => idle,
        Err(e) if crate::connection::is_transport(&e) => return Err(e),
        Err(_) => None,
    };
    let fields: redis::RedisResult<HashMap<String, String>> =
        query(con, redis::cmd("HGETALL").arg(key)).await;
    match fields {
        Ok(fields) => Ok(Found { fields, idle_s }),
        Err(e) if crate::connection::is_transport(&e) => Err(e),
        Err(e) => {
            tracing::warn!(
                error = %describe(&e),
                "cannot read the counters hash `{key}` to look for another writer"
            );
            Ok(Found::default())
        }
    }
}

/// Judges what the hash held (docs/service.md#key-namespace): another
/// program's fields, or another ruled that says it runs (another pid or
/// host) and touched the hash within two stats intervals. On this host, a
/// `running` pid that no longer exists is a ruled that did not stop
/// cleanly, not a collision.
pub fn judge(
    found: &Found,
    me: &Owner,
    known: &BTreeSet<&'static str>,
    stats_interval: Duration,
) -> Option<Collision> {
    let mut foreign: Vec<String> = found
        .fields
        .keys()
        .filter(|field| !known.contains(field.as_str()))
        .cloned()
        .collect();
    if !foreign.is_empty() {
        foreign.sort();
        return Some(Collision::ForeignFields(foreign));
    }
    let field = |name: &str| found.fields.get(name).map(String::as_str).unwrap_or("");
    let (pid, host) = (field("pid"), field("host"));
    if field("state") != RUNNING || (pid == me.pid.to_string() && host == me.host) {
        return None;
    }
    if host == me.host && !process_exists(pid) {
        return None;
    }
    let window = stats_interval.saturating_mul(2).as_secs().max(1);
    if found.idle_s.is_some_and(|idle| idle > window) {
        return None;
    }
    Some(Collision::LiveRuled {
        pid: pid.to_string(),
        host: host.to_string(),
        idle_s: found.idle_s,
    })
}

/// Whether a process `pid` exists on this host (one we may not signal
/// exists too).
fn process_exists(pid: &str) -> bool {
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    let pid = nix::unistd::Pid::from_raw(pid);
    !matches!(
        nix::sys::signal::kill(pid, None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Logs a collision: what the hash says, and the flag that ends it.
pub fn warn(collision: &Collision, namespace: &Namespace) {
    match collision {
        Collision::LiveRuled { pid, host, idle_s } => tracing::warn!(
            namespace = %namespace,
            other_pid = %pid,
            other_host = %host,
            idle_s = ?idle_s,
            "namespace collision: the counters hash `{namespace}` says another ruled is running \
             on it (another pid or host, written within the last two stats intervals); both \
             would share pending records and counters. Give each its own --namespace \
             (RULED_NAMESPACE)"
        ),
        Collision::ForeignFields(fields) => tracing::warn!(
            namespace = %namespace,
            fields = %fields.join(","),
            "namespace collision: the counters hash `{namespace}` holds fields ruled never \
             writes, so another program (the Go event-service?) writes it and may drop ruled's \
             pending records at its start. Run ruled with --namespace ruled \
             (RULED_NAMESPACE), or another name of its own"
        ),
    }
}

/// At start, before the first counters write: reads the hash and warns
/// about a collision. Only a lost connection is an error.
pub async fn check(
    con: &mut ConnectionManager,
    namespace: &Namespace,
    me: &Owner,
    known: &BTreeSet<&'static str>,
    stats_interval: Duration,
) -> redis::RedisResult<()> {
    let found = read(con, namespace).await?;
    let field = |name: &str| found.fields.get(name).cloned().unwrap_or_default();
    match judge(&found, me, known, stats_interval) {
        Some(collision) => warn(&collision, namespace),
        None if field("state") == RUNNING => tracing::info!(
            pid = %field("pid"),
            host = %field("host"),
            "the counters hash `{namespace}` says `state running` of a ruled that is gone: \
             it did not stop cleanly (crash, SIGKILL, power loss)"
        ),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            pid: 100,
            host: "scooter".into(),
            started_at_ms: 1,
        }
    }

    fn found(fields: &[(&str, &str)], idle_s: Option<u64>) -> Found {
        Found {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            idle_s,
        }
    }

    fn known() -> BTreeSet<&'static str> {
        ["state", "pid", "host", "started-at", "rules"].into()
    }

    const TEN_S: Duration = Duration::from_secs(10);

    #[test]
    fn another_program_s_fields_are_a_collision() {
        let hash = found(&[("rules", "1"), ("uptime", "5"), ("events", "9")], Some(0));
        assert_eq!(
            judge(&hash, &me(), &known(), TEN_S),
            Some(Collision::ForeignFields(vec![
                "events".into(),
                "uptime".into()
            ]))
        );
    }

    #[test]
    fn a_ruled_elsewhere_written_lately_is_a_collision() {
        let other = |idle| {
            found(
                &[("state", "running"), ("pid", "7"), ("host", "bench")],
                idle,
            )
        };
        let live = judge(&other(Some(20)), &me(), &known(), TEN_S);
        assert!(
            matches!(live, Some(Collision::LiveRuled { .. })),
            "{live:?}"
        );
        // Redis does not say: a warning errs on the safe side.
        assert!(judge(&other(None), &me(), &known(), TEN_S).is_some());
        // Older than two intervals: a ruled that is gone.
        assert_eq!(judge(&other(Some(21)), &me(), &known(), TEN_S), None);
    }

    #[test]
    fn a_stopped_or_own_or_vanished_ruled_is_none() {
        let stopped = found(
            &[("state", "stopped"), ("pid", "7"), ("host", "x")],
            Some(0),
        );
        assert_eq!(judge(&stopped, &me(), &known(), TEN_S), None);
        let own = found(
            &[("state", "running"), ("pid", "100"), ("host", "scooter")],
            Some(0),
        );
        assert_eq!(judge(&own, &me(), &known(), TEN_S), None);
        // Same host, a pid that cannot exist: it crashed.
        let gone = found(
            &[
                ("state", "running"),
                ("pid", "999999999"),
                ("host", "scooter"),
            ],
            Some(0),
        );
        assert_eq!(judge(&gone, &me(), &known(), TEN_S), None);
        assert_eq!(judge(&Found::default(), &me(), &known(), TEN_S), None);
    }
}
