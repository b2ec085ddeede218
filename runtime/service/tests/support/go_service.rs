//! A stand-in for Librescoot's Go event-service as it touches Redis keys
//! (docs/service.md#living-beside-the-go-event-service), written from what
//! it is observed to do, not from its source: at start it drops every field
//! of `extensions:pending` it does not know (it knows none of ruled's), then
//! writes its own counters into the hash `extensions` every second.
#![allow(dead_code, clippy::expect_used)]

use super::RedisServer;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often it writes its counters.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The stand-in, running in a thread of the test; stopped on drop.
#[derive(Debug)]
pub struct GoEventService {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl GoEventService {
    /// Starts it against `redis`: returns once it has dropped the pending
    /// records it does not know and written its counters once.
    pub fn start(redis: &RedisServer) -> Self {
        let mut con = redis.con();
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg("extensions:pending")
            .query(&mut con)
            .expect("HKEYS extensions:pending");
        for field in fields {
            let _: i64 = redis::cmd("HDEL")
                .arg("extensions:pending")
                .arg(&field)
                .query(&mut con)
                .expect("HDEL");
        }
        write_counters(&mut con, 1);
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut tick = 1u64;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(INTERVAL) {
                tick += 1;
                write_counters(&mut con, tick);
            }
        });
        Self {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// How many times it has written its counters (read from Redis).
    pub fn ticks(redis: &RedisServer) -> u64 {
        let ticks: Option<u64> = redis.query(&["HGET", "extensions", "ticks"]);
        ticks.unwrap_or(0)
    }
}

/// The whole hash, as an interval writer does: ruled's fields are neither
/// known nor kept apart.
fn write_counters(con: &mut redis::Connection, tick: u64) {
    let _: i64 = redis::cmd("HSET")
        .arg("extensions")
        .arg("ticks")
        .arg(tick)
        .arg("events-published")
        .arg(tick * 3)
        .arg("rules")
        .arg(0)
        .arg("pending")
        .arg(0)
        .query(con)
        .expect("HSET extensions");
}

impl Drop for GoEventService {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
