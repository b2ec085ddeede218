//! `ruled ctl` run as a child process, as an operator runs it, with no
//! `RULED_*` variable of the test's environment leaking in.

use super::RedisServer;
use std::process::Command;

/// What one `ruled ctl` run printed, and how it exited.
#[derive(Debug)]
pub struct Ctl {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `ruled ctl --redis URL ARGS`.
pub fn ctl_at(url: &str, args: &[&str]) -> Ctl {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruled"));
    command.arg("ctl").arg("--redis").arg(url).args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("RULED_") {
            command.env_remove(key);
        }
    }
    let out = command.output().expect("run ruled ctl");
    Ctl {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `ruled ctl ARGS` against `redis`.
pub fn ctl(redis: &RedisServer, args: &[&str]) -> Ctl {
    ctl_at(&redis.url(), args)
}
