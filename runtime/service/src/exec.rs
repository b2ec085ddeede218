//! The `exec` action (docs/semantics.md#worker-pool-and-actions): run a command (no shell, no arguments)
//! in its own process group, the event JSON on stdin, stdout discarded,
//! stderr kept (bounded) for the error message, `LS_*` variables describing
//! the event. At the timeout, or when the pool stops, the whole group is
//! killed, so a script's background children go with it.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use rulecore::event::Event;
use rulecore::event_data::DataValue;
use std::collections::HashSet;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// How much of stderr an error message keeps.
const STDERR_KEEP: usize = 2048;
/// The longest `KEY=value` an `LS_` variable may be (the kernel's
/// MAX_ARG_STRLEN is 128 KiB), and all of them together (ARG_MAX is at
/// least 128 KiB, commonly 2 MiB, shared with ruled's own environment).
const VAR_MAX: usize = 32 * 1024;
const VARS_MAX: usize = 96 * 1024;
/// How long stderr may keep draining after the command exited: a background
/// child holding the pipe open must not hold the worker.
const STDERR_GRACE: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("waiting for `{command}`: {source}")]
    Wait {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` timed out after {timeout_ms}ms; its process group was killed")]
    Timeout { command: String, timeout_ms: u128 },
    #[error("`{command}` was killed: ruled is stopping")]
    Stopped { command: String },
    #[error("`{command}` exited with {status}{}", stderr_suffix(.stderr))]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!(": {trimmed}")
    }
}

/// Process groups of the `exec` actions running now, killed at stop.
#[derive(Debug, Clone, Default)]
pub struct RunningGroups(Arc<Mutex<Groups>>);

#[derive(Debug, Default)]
struct Groups {
    running: HashSet<i32>,
    /// Set by [`RunningGroups::kill_all`]: a group spawned afterwards (its
    /// worker had taken the job just before the stop) is killed at once.
    closed: bool,
}

impl RunningGroups {
    fn lock(&self) -> std::sync::MutexGuard<'_, Groups> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
    /// Registers a group; `false` when the pool is stopping (kill it).
    fn insert(&self, pgid: i32) -> bool {
        let mut groups = self.lock();
        if groups.closed {
            return false;
        }
        groups.running.insert(pgid);
        true
    }
    fn remove(&self, pgid: i32) {
        self.lock().running.remove(&pgid);
    }
    /// SIGKILLs every running group, and every group started from now on.
    pub fn kill_all(&self) {
        let groups: Vec<i32> = {
            let mut groups = self.lock();
            groups.closed = true;
            groups.running.iter().copied().collect()
        };
        for pgid in groups {
            tracing::info!(pgid, "stopping: killing exec process group");
            kill_group(pgid);
        }
    }
}

fn kill_group(pgid: i32) {
    // ESRCH: the group is already gone, which is what we wanted.
    match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, "cannot kill process group: {e}"),
    }
}

/// The `LS_*` variables for an event (docs/semantics.md#worker-pool-and-actions).
fn event_env(event: &Event) -> Vec<(String, String)> {
    let mut vars = vec![
        ("LS_TOPIC".to_string(), event.topic.to_string()),
        ("LS_SRC".to_string(), event.src().to_string()),
        ("LS_FROM".to_string(), event.from().to_string()),
        ("LS_TO".to_string(), event.to().to_string()),
        ("LS_ID".to_string(), event.id().to_string()),
    ];
    if let Some(data) = event.data.as_object() {
        for (key, value) in data {
            let text = match value {
                DataValue::Str(s) => s.to_string(),
                DataValue::Int(i) => i.to_string(),
                DataValue::UInt(u) => u.to_string(),
                // Written as JSON writes it (`7.5`, `1e20`).
                DataValue::Float(_) => value.to_json().to_string(),
                DataValue::Bool(b) => b.to_string(),
                // Not scalars: objects and arrays have no one-line value, and
                // null is "no value".
                DataValue::Null | DataValue::Array(_) | DataValue::Object(_) => continue,
            };
            vars.push((format!("LS_DATA_{}", env_key(key)), text));
        }
    }
    // What the kernel refuses would make the spawn itself fail, for every
    // exec action of such an event: a NUL in a value, one variable longer
    // than MAX_ARG_STRLEN (128 KiB), or all of them past ARG_MAX. Such a
    // variable is left out instead; the event JSON on stdin still carries
    // it (docs/service.md "Actions").
    let mut total = 0usize;
    vars.retain(|(key, value)| {
        let size = key.len() + value.len() + 2;
        let why = if value.contains('\0') {
            Some("its value holds a NUL")
        } else if size > VAR_MAX {
            Some("it is too long")
        } else if total + size > VARS_MAX {
            Some("the LS_ variables are too long together")
        } else {
            None
        };
        match why {
            Some(why) => {
                tracing::debug!(var = %key, "exec: variable left out: {why}");
                false
            }
            None => {
                total += size;
                true
            }
        }
    });
    vars
}

/// Upper-cases `key` and turns every character outside `A-Z0-9` into `_`.
fn env_key(key: &str) -> String {
    key.chars()
        .map(|c| {
            let c = c.to_ascii_uppercase();
            if c.is_ascii_uppercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs `command` for `event`, killing its group after `timeout`.
pub async fn run(
    command: &str,
    timeout: Duration,
    event: &Event,
    groups: &RunningGroups,
) -> Result<(), ExecError> {
    // An `Event` is strings and a JSON value: serialising it cannot fail,
    // but if it ever did the command should not run on an empty stdin.
    let stdin_json = serde_json::to_vec(event).map_err(|e| ExecError::Spawn {
        command: command.to_string(),
        source: std::io::Error::other(format!("encoding the event for stdin: {e}")),
    })?;
    let mut child = spawn(command, event)?;
    // With process_group(0) the child leads a group whose id is its pid.
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    if let Some(pgid) = pgid {
        if !groups.insert(pgid) {
            kill_group(pgid);
            if let Err(e) = child.wait().await {
                tracing::warn!("reaping `{command}` killed at stop: {e}");
            }
            return Err(ExecError::Stopped {
                command: command.to_string(),
            });
        }
    }
    feed_stdin(&mut child, stdin_json, timeout);
    let stderr = StderrTail::collect(&mut child);
    let result = wait(command, timeout, &mut child, pgid, stderr).await;
    if let Some(pgid) = pgid {
        groups.remove(pgid);
    }
    result
}

/// The names of ruled's own `RULED_*` variables, read once: ruled never
/// changes its environment, and an exec must not scan it every time.
static RULED_KEYS: LazyLock<Vec<OsString>> = LazyLock::new(|| {
    std::env::vars_os()
        .map(|(key, _)| key)
        .filter(|key| key.as_encoded_bytes().starts_with(b"RULED_"))
        .collect()
});

/// Starts `command` in a process group of its own, with the event's `LS_*`
/// variables and pipes for stdin and stderr.
fn spawn(command: &str, event: &Event) -> Result<Child, ExecError> {
    let mut builder = Command::new(command);
    // ruled's own settings (`RULED_REDIS` may hold a password) are not the
    // command's business (docs/service.md#actions).
    for key in RULED_KEYS.iter() {
        builder.env_remove(key);
    }
    builder
        // The child must not talk to systemd as ruled (READY=1, STOPPING=1
        // for a unit it is not): systemd's socket is ruled's alone.
        .env_remove("NOTIFY_SOCKET")
        .envs(event_env(event))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ExecError::Spawn {
            command: command.to_string(),
            source,
        })
}

/// Writes the event JSON to the child's stdin on a task of its own.
fn feed_stdin(child: &mut Child, stdin_json: Vec<u8>, timeout: Duration) {
    let Some(mut stdin) = child.stdin.take() else {
        return;
    };
    tokio::spawn(async move {
        // A command that does not read its stdin closes the pipe early:
        // that is its business, not an error. A background child that
        // inherited the pipe and never reads it would hold this task
        // (and the event) forever once the pipe is full: bounded by the
        // action's timeout.
        match tokio::time::timeout(timeout, stdin.write_all(&stdin_json)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("exec stdin: {e}"),
            Err(_) => tracing::debug!("exec stdin: not read within the timeout; dropped"),
        }
    });
}

/// The first [`STDERR_KEEP`] bytes of the child's stderr, read by a task
/// of its own; aborted when dropped.
struct StderrTail {
    kept: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl StderrTail {
    fn collect(child: &mut Child) -> Self {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stderr.take().map(|mut stderr| {
            let sink = Arc::clone(&kept);
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                loop {
                    match stderr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut kept = sink.lock().unwrap_or_else(PoisonError::into_inner);
                            let room = STDERR_KEEP.saturating_sub(kept.len());
                            kept.extend_from_slice(&buf[..n.min(room)]);
                        }
                    }
                }
            })
        });
        Self { kept, reader }
    }

    /// What arrived, after waiting at most [`STDERR_GRACE`] for the rest.
    async fn text(&mut self) -> String {
        if let Some(reader) = self.reader.as_mut() {
            // Best effort: whatever arrived within the grace is kept.
            let _ = tokio::time::timeout(STDERR_GRACE, reader).await;
        }
        String::from_utf8_lossy(&self.kept.lock().unwrap_or_else(PoisonError::into_inner))
            .into_owned()
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

/// Waits for the child, killing its group at the timeout.
async fn wait(
    command: &str,
    timeout: Duration,
    child: &mut Child,
    pgid: Option<i32>,
    mut stderr: StderrTail,
) -> Result<(), ExecError> {
    match tokio::time::timeout(timeout, child.wait()).await {
        Err(_elapsed) => {
            if let Some(pgid) = pgid {
                kill_group(pgid);
            }
            // Reap the leader so it does not linger as a zombie.
            if let Err(e) = child.wait().await {
                tracing::warn!("reaping `{command}` after its timeout: {e}");
            }
            Err(ExecError::Timeout {
                command: command.to_string(),
                timeout_ms: timeout.as_millis(),
            })
        }
        Ok(Err(source)) => Err(ExecError::Wait {
            command: command.to_string(),
            source,
        }),
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(ExecError::Failed {
            command: command.to_string(),
            status,
            stderr: stderr.text().await,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_keys_are_upper_snake() {
        assert_eq!(env_key("level"), "LEVEL");
        assert_eq!(env_key("speed-kmh"), "SPEED_KMH");
        assert_eq!(env_key("a.b c"), "A_B_C");
        assert_eq!(env_key("grüße"), "GR__E");
    }

    #[test]
    fn env_has_event_fields_and_scalar_data() {
        let event = Event::decode(
            br#"{"id":"e1","topic":"alarm.triggered","src":"alarm","to":"on","data":{"level":2,"name":"x","ok":true,"nested":{"a":1},"list":[1],"none":null}}"#,
        )
        .unwrap();
        let vars = event_env(&event);
        let get = |k: &str| {
            vars.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("LS_TOPIC"), Some("alarm.triggered"));
        assert_eq!(get("LS_FROM"), Some(""));
        assert_eq!(get("LS_ID"), Some("e1"));
        assert_eq!(get("LS_DATA_LEVEL"), Some("2"));
        assert_eq!(get("LS_DATA_NAME"), Some("x"));
        assert_eq!(get("LS_DATA_OK"), Some("true"));
        assert_eq!(get("LS_DATA_NESTED"), None);
        assert_eq!(get("LS_DATA_LIST"), None);
        assert_eq!(get("LS_DATA_NONE"), None);
    }

    #[test]
    fn a_nul_in_a_value_leaves_that_variable_out() {
        let event = Event::decode(
            br#"{"topic":"t","src":"a\u0000b","data":{"bad":"x\u0000y","good":"z"}}"#,
        )
        .unwrap();
        let vars = event_env(&event);
        let keys: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        assert!(!keys.contains(&"LS_SRC"), "{keys:?}");
        assert!(!keys.contains(&"LS_DATA_BAD"), "{keys:?}");
        assert!(keys.contains(&"LS_DATA_GOOD"), "{keys:?}");
        assert!(keys.contains(&"LS_TOPIC"), "{keys:?}");
    }

    #[test]
    fn over_long_values_are_left_out_and_the_rest_is_bounded() {
        let mut data = serde_json::Map::new();
        data.insert("huge".into(), "x".repeat(200_000).into());
        for n in 0..10 {
            data.insert(format!("k{n}"), "y".repeat(20_000).into());
        }
        let event = Event::decode(
            serde_json::json!({"topic": "t", "data": data})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        let vars = event_env(&event);
        let keys: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        assert!(!keys.contains(&"LS_DATA_HUGE"), "{keys:?}");
        assert!(keys.contains(&"LS_TOPIC"), "{keys:?}");
        assert!(keys.contains(&"LS_DATA_K0"), "{keys:?}");
        let total: usize = vars.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        assert!(total <= VARS_MAX, "{total}");
    }

    #[tokio::test]
    async fn an_over_long_value_does_not_stop_the_command() {
        let event = Event::decode(
            serde_json::json!({"topic": "t", "data": {"big": "x".repeat(200_000)}})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        run(
            "/bin/true",
            Duration::from_secs(10),
            &event,
            &RunningGroups::default(),
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_nul_in_the_event_does_not_stop_the_command() {
        let event = Event::decode(br#"{"topic":"t","data":{"bad":"x\u0000y"}}"#).unwrap();
        run(
            "/bin/true",
            Duration::from_secs(10),
            &event,
            &RunningGroups::default(),
        )
        .await
        .unwrap();
    }
}
