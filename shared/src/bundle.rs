//! The compiled rule bundle (DESIGN.md 5): the data model both halves share.
//!
//! File layout: 8-byte magic, format version (u16 LE), blake3 digest of the
//! payload (32 bytes), payload length (u64 LE), payload (postcard).

use crate::bytecode::{Const, Program};
use crate::topic::TopicPattern;
use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 8] = *b"SCRULES\0";
pub const FORMAT_VERSION: u16 = 1;

/// Everything a bundle carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// `rulec`'s version that wrote the bundle.
    pub compiler_version: String,
    /// In bundle order: rules file name order, then position in the file.
    pub rules: Vec<Rule>,
    /// Every `state("hash", "field")` pair any expression uses, sorted.
    pub state_pairs: Vec<StatePair>,
    pub consts: Vec<Const>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StatePair {
    pub hash: String,
    pub field: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub name: String,
    /// The rule file's name relative to the rules directory.
    pub source: String,
    /// `false`: replay-only (DESIGN.md 3.5).
    pub enabled: bool,
    pub on: Vec<TopicPattern>,
    pub cancel_on: Vec<TopicPattern>,
    pub concurrency: Concurrency,
    /// Nanoseconds; 0 means none.
    pub cooldown_ns: u64,
    /// Nanoseconds; 0 means none.
    pub debounce_ns: u64,
    pub repeat: Repeat,
    pub when: Option<Program>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Concurrency {
    Restart,
    Drop,
    Queue,
}

/// `count` passes in all, `every_ns` apart. One pass is `{ count: 1, every_ns: 0 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeat {
    pub count: u32,
    pub every_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub action: Action,
    pub when: Option<Program>,
    pub after_ns: u64,
    pub durable: bool,
    pub fingerprint: Fingerprint,
}

/// 16 bytes of blake3, shown as 32 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fingerprint(pub [u8; 16]);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// `LPUSH list push`
    Redis { list: String, push: String },
    /// Run `command` (no arguments, no shell); killed with its process group
    /// after `timeout_ns`.
    Exec { command: String, timeout_ns: u64 },
    /// One raw SocketCAN frame.
    Can(CanFrame),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanFrame {
    pub iface: String,
    /// At most 0x1FFFFFFF.
    pub id: u32,
    /// Set when `id` > 0x7FF.
    pub extended: bool,
    pub rtr: bool,
    /// Data length code: `data.len()` for a data frame, the requested length
    /// for a remote frame.
    pub dlc: u8,
    /// At most 8 bytes; empty for a remote frame.
    pub data: Vec<u8>,
}
