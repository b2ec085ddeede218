//! `--pending-file` (docs/service.md#the-pending-file): a copy of the
//! pending records on flash, for a Redis that keeps nothing across a
//! reboot. Written atomically at stop, when `power-manager` goes to a
//! suspend, hibernate or reboot state, and at most once a minute while a
//! record is due more than the replay window ahead; restored at start when
//! `NS:pending` is empty.
//!
//! The file: a header line `ruled-pending 1 <written-ms> <records>
//! <blake3 of the rest>`, then one record's JSON per line. A file whose
//! header, count or digest does not match is reported and removed.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// At most once a minute (bounded flash wear).
pub const WRITE_EVERY: Duration = Duration::from_secs(60);
/// A pending file is read whole up to this bound.
pub const FILE_MAX: u64 = 64 * 1024 * 1024;
const MAGIC: &str = "ruled-pending";
const VERSION: u32 = 1;

/// Why a pending file was not taken.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("not a pending file (its first line is not `{MAGIC} {VERSION} ...`)")]
    Header,
    #[error("truncated or changed: it declares {declared} records, {found} are there")]
    Count { declared: usize, found: usize },
    #[error("truncated or changed: its digest does not match its records")]
    Digest,
    #[error("record {line} is not JSON with a string `id`")]
    Record { line: usize },
}

/// The records of a pending file and when it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    pub written_ms: i64,
    /// `(id, json)` in id order.
    pub records: Vec<(String, String)>,
}

/// The file's bytes for `records`, written at `written_ms`.
pub fn encode(written_ms: i64, records: &BTreeMap<String, (i64, String)>) -> Vec<u8> {
    let mut body = Vec::new();
    for (_, json) in records.values() {
        body.extend_from_slice(json.as_bytes());
        body.push(b'\n');
    }
    let digest = blake3::hash(&body).to_hex();
    let mut out = format!(
        "{MAGIC} {VERSION} {written_ms} {} {digest}\n",
        records.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Reads a file's bytes back, every check made.
pub fn decode(bytes: &[u8]) -> Result<Contents, FileError> {
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(FileError::Header)?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| FileError::Header)?;
    let body = &bytes[newline + 1..];
    let parts: Vec<&str> = header.split(' ').collect();
    let [magic, version, written, count, digest] = parts[..] else {
        return Err(FileError::Header);
    };
    if magic != MAGIC || version != VERSION.to_string() {
        return Err(FileError::Header);
    }
    let written_ms: i64 = written.parse().map_err(|_| FileError::Header)?;
    let declared: usize = count.parse().map_err(|_| FileError::Header)?;
    let found = body.iter().filter(|&&b| b == b'\n').count();
    if found != declared || body.last().is_some_and(|&b| b != b'\n') {
        return Err(FileError::Count { declared, found });
    }
    if blake3::hash(body).to_hex().as_str() != digest {
        return Err(FileError::Digest);
    }
    let mut records = Vec::with_capacity(declared);
    for (index, line) in body.split(|&b| b == b'\n').take(declared).enumerate() {
        let record = FileError::Record { line: index + 1 };
        let json = std::str::from_utf8(line).map_err(|_| FileError::Record { line: index + 1 })?;
        let value: serde_json::Value = serde_json::from_str(json).map_err(|_| record)?;
        let Some(id) = value.get("id").and_then(serde_json::Value::as_str) else {
            return Err(FileError::Record { line: index + 1 });
        };
        records.push((id.to_string(), json.to_string()));
    }
    Ok(Contents {
        written_ms,
        records,
    })
}

/// Writes `bytes` to `path` atomically: a temporary file beside it,
/// synced, renamed over it, the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty());
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
    }
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = dir {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Whether a `power-manager` `state` is one after which Redis may be gone:
/// a suspend, a hibernation or a reboot (announced or under way).
pub fn power_state_loses_redis(state: &str) -> bool {
    ["suspending", "hibernating", "reboot"]
        .iter()
        .any(|prefix| state.starts_with(prefix))
}

/// Records held back at start: the wall clock was earlier than the file's
/// write time (not yet set after boot).
#[derive(Debug)]
pub struct Held {
    pub contents: Contents,
}

/// The service's copy of its pending records and the file it keeps.
#[derive(Debug)]
pub struct PendingFile {
    path: PathBuf,
    /// id -> (fire-at, json), as the engine wrote and removed them.
    mirror: BTreeMap<String, (i64, String)>,
    /// Jobs handed to the pool whose record their worker removes when
    /// the action starts: job id -> record id. The record stays in the
    /// copy until then (a job still queued at stop is abandoned and keeps
    /// its record in Redis, so in the file too).
    starting: HashMap<u64, String>,
    /// The mirror changed since the file was written.
    dirty: bool,
    last_write: Option<Instant>,
    /// Bytes written so far (the flash-wear figure).
    written_bytes: u64,
    writes: u64,
    /// `--replay-window`: a wait longer than this is worth the flash.
    window_ms: i64,
    pub held: Option<Held>,
}

impl PendingFile {
    pub fn new(path: PathBuf, window_ms: i64) -> Self {
        Self {
            path,
            window_ms,
            mirror: BTreeMap::new(),
            starting: HashMap::new(),
            dirty: false,
            last_write: None,
            written_bytes: 0,
            writes: 0,
            held: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A record the engine wrote.
    pub fn put(&mut self, id: &str, fire_at: i64, json: &str) {
        self.mirror
            .insert(id.to_string(), (fire_at, json.to_string()));
        self.dirty = true;
    }

    /// A record the engine (or a starting job) removed.
    pub fn drop_record(&mut self, id: &str) {
        if self.mirror.remove(id).is_some() {
            self.dirty = true;
        }
    }

    /// Job `job` was handed to the pool; its worker removes record `id`
    /// when the action starts ([`PendingFile::job_started`]).
    pub fn job_submitted(&mut self, job: u64, id: &str) {
        self.starting.insert(job, id.to_string());
    }

    /// Job `job` started (or its guard refused it): its worker removed
    /// its record, which leaves the copy.
    pub fn job_started(&mut self, job: u64) {
        if let Some(id) = self.starting.remove(&job) {
            self.drop_record(&id);
        }
    }

    /// Job `job` never started (abandoned at stop, or refused whole by
    /// Redis): its record stays, in Redis and in the copy.
    pub fn job_not_started(&mut self, job: u64) {
        self.starting.remove(&job);
    }

    /// Whether a record is due more than `window_ms` after `now_ms`.
    pub fn long_wait(&self, now_ms: i64, window_ms: i64) -> bool {
        let horizon = now_ms.saturating_add(window_ms.max(0));
        self.mirror.values().any(|(fire_at, _)| *fire_at > horizon)
    }

    /// The minute's write: only when the records changed since the last
    /// write, a long wait exists (or the file holds records that are gone),
    /// and a minute has passed.
    pub fn tick(&mut self, now_ms: i64, at: Instant) {
        let window_ms = self.window_ms;
        let due = self
            .last_write
            .is_none_or(|last| at.duration_since(last) >= WRITE_EVERY);
        let on_flash = self.last_write.is_some();
        if self.dirty && due && (self.long_wait(now_ms, window_ms) || on_flash) {
            self.write("a record waits longer than the replay window", now_ms, at);
        }
    }

    /// Writes the file now (stop, a suspend): the records, or no file
    /// when there are none. A held file is left alone.
    pub fn write(&mut self, why: &str, now_ms: i64, at: Instant) {
        if self.held.is_some() {
            return;
        }
        self.dirty = false;
        self.last_write = Some(at);
        if self.mirror.is_empty() {
            match std::fs::remove_file(&self.path) {
                Ok(()) => tracing::info!(
                    path = %self.path.display(),
                    "pending file removed: nothing waits ({why})"
                ),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => tracing::info!(
                    path = %self.path.display(),
                    "pending file not written: nothing waits ({why})"
                ),
                Err(error) => {
                    tracing::error!(path = %self.path.display(), "pending file not removed: {error}")
                }
            }
            return;
        }
        let bytes = encode(now_ms, &self.mirror);
        match write_atomic(&self.path, &bytes) {
            Ok(()) => {
                self.writes += 1;
                self.written_bytes += bytes.len() as u64;
                tracing::info!(
                    path = %self.path.display(),
                    records = self.mirror.len(),
                    bytes = bytes.len(),
                    "pending file written ({why})"
                );
            }
            Err(error) => tracing::error!(
                path = %self.path.display(),
                "pending file not written ({error}): waiting steps do not survive a reboot"
            ),
        }
    }

    /// (writes, bytes) so far.
    pub fn wear(&self) -> (u64, u64) {
        (self.writes, self.written_bytes)
    }

    /// The file at start, when `NS:pending` is empty: its records, or
    /// `None` (no file; or a bad one, reported and removed).
    pub fn read_at_start(&self) -> Option<Contents> {
        let bytes = match rulecore_io::input_file::read_bounded(&self.path, FILE_MAX) {
            Ok(bytes) => bytes,
            Err(error) => {
                if self.path.exists() {
                    tracing::error!(path = %self.path.display(), "pending file not read: {error}");
                }
                return None;
            }
        };
        match decode(&bytes) {
            Ok(contents) => Some(contents),
            Err(error) => {
                tracing::error!(
                    path = %self.path.display(),
                    "pending file is corrupt ({error}): removed, its records are lost"
                );
                self.remove();
                None
            }
        }
    }

    /// Removes the file (its records are in Redis, or it was bad).
    pub fn remove(&self) {
        if let Err(error) = std::fs::remove_file(&self.path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::error!(path = %self.path.display(), "pending file not removed: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> BTreeMap<String, (i64, String)> {
        let mut records = BTreeMap::new();
        records.insert(
            "a#1-1".to_string(),
            (5, r#"{"id":"a#1-1","rule":"a"}"#.to_string()),
        );
        records.insert(
            "b#1-2".to_string(),
            (9, r#"{"id":"b#1-2","rule":"b"}"#.to_string()),
        );
        records
    }

    #[test]
    fn a_file_reads_back_and_a_damaged_one_is_refused() {
        let bytes = encode(1_234, &records());
        let contents = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(contents.written_ms, 1_234);
        assert_eq!(contents.records.len(), 2);
        assert_eq!(contents.records[0].0, "a#1-1");
        // Truncated in the middle of a record.
        assert!(matches!(
            decode(&bytes[..bytes.len() - 5]),
            Err(FileError::Count { .. })
        ));
        // One byte changed.
        let mut changed = bytes.clone();
        let last = changed.len() - 3;
        changed[last] ^= 1;
        assert!(matches!(decode(&changed), Err(FileError::Digest)));
        assert!(matches!(decode(b"garbage"), Err(FileError::Header)));
    }

    /// The flash-wear figure of docs/service.md#the-pending-file: 100 long
    /// waits of the hazards rule's record size, written at most once a minute.
    #[test]
    fn flash_wear_figure() {
        // docs/service.md#the-pending-file: 100 long waits parked, the
        // minute's check driven through an hour of one-second ticks.
        let event = r#"{"topic":"alarm.triggered","src":"alarm-service","from":"armed","to":"level-2-triggered","data":{"level":2}}"#;
        let record = |n: u32, fire_at: i64| {
            let id = format!("hazards-on-alarm#1764892800000-{n}");
            let json = format!(
                r#"{{"id":"{id}","rule":"hazards-on-alarm","source":"10-alarm.toml","step":1,"iter":0,"fire-at":{fire_at},"fingerprint":"{}","event":{event}}}"#,
                "0".repeat(64)
            );
            (id, json)
        };
        let dir = tempfile::tempdir().unwrap();
        let now_ms = 1_764_892_800_000_i64;
        let hour = |changing: bool| {
            let mut file = PendingFile::new(dir.path().join("pending.bin"), 300_000);
            for n in 0..100 {
                let fire_at = now_ms + 86_400_000;
                let (id, json) = record(n, fire_at);
                file.put(&id, fire_at, &json);
            }
            let start = Instant::now();
            for second in 0..3_600_u32 {
                if changing {
                    // One wait ends and another starts every second.
                    let (id, json) = record(100 + second, now_ms + 86_400_000);
                    file.put(&id, now_ms + 86_400_000, &json);
                    file.drop_record(&record(second, 0).0);
                }
                let at = start + Duration::from_secs(u64::from(second));
                file.tick(now_ms + i64::from(second) * 1_000, at);
            }
            file.wear()
        };
        // Parked and unchanged: written once in the hour.
        let (writes, bytes) = hour(false);
        assert_eq!(writes, 1);
        assert!(bytes < 40 * 1024, "{bytes} bytes a file");
        // Changing every second: at most once a minute.
        let (writes, bytes) = hour(true);
        assert_eq!(writes, 60, "{bytes} bytes");
        assert!(bytes < 2 * 1024 * 1024, "{bytes} bytes an hour");
        eprintln!("flash wear: 100 long waits, {writes} writes, {bytes} bytes an hour");
    }

    #[test]
    fn power_states_that_lose_redis() {
        for state in [
            "suspending",
            "suspending-imminent",
            "hibernating-manual-imminent",
            "reboot",
        ] {
            assert!(power_state_loses_redis(state), "{state}");
        }
        for state in ["running", "", "parked"] {
            assert!(!power_state_loses_redis(state), "{state}");
        }
    }
}
