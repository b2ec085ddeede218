//! Test support: a throwaway `redis-server` per test (unix socket in a temp
//! dir, no persistence), a `ruled` child process with its log captured, and
//! polling with generous deadlines.
#![allow(dead_code, clippy::expect_used, clippy::print_stderr)]

pub mod bundles;
pub mod ctl;
pub mod go_service;
pub mod librescoot;
pub mod lsc;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for an outcome before it fails. Generous: the
/// machine may be busy compiling other crates.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A port nobody listens on right now (the kernel's pick), for a
/// `redis-server` on TCP.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// A `redis-server` of our own, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    /// Flags added to every start (e.g. a TLS port).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a unix socket in a fresh temp dir. Fails the test
    /// (with how to install it) when `redis-server` is not on the PATH.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`RedisServer::start`] with extra `redis-server` flags; the unix
    /// socket (what the test's own connection uses) stays plain.
    pub fn start_with(extra: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("redis.sock");
        let child = spawn_server(dir.path(), &socket, extra);
        let server = Self {
            child,
            dir,
            socket,
            extra: extra.to_vec(),
        };
        server.wait_up();
        server
    }

    /// Kills the server and starts a fresh one (empty) on the same socket.
    pub fn restart(&mut self) {
        self.kill();
        self.respawn();
    }

    /// Kills the server; [`RedisServer::respawn`] brings one back.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Starts a fresh (empty) server on the same socket.
    pub fn respawn(&mut self) {
        self.child = spawn_server(self.dir.path(), &self.socket, &self.extra);
        self.wait_up();
    }

    fn wait_up(&self) {
        let started = Instant::now();
        loop {
            if self.socket.exists() {
                if let Ok(mut con) = self.try_connection() {
                    if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                        return;
                    }
                }
            }
            assert!(
                started.elapsed() < DEADLINE,
                "redis-server did not come up on {}",
                self.socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id (a benchmark pins it to a core).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL `ruled --redis` takes for this server.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection()
    }

    pub fn con(&self) -> redis::Connection {
        self.try_connection().expect("connect to the test redis")
    }

    /// Runs one command and returns its reply.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        query(&mut self.con(), args)
    }

    /// A list's items, oldest push first (LPUSH prepends).
    pub fn list(&self, key: &str) -> Vec<String> {
        let mut items: Vec<String> = self.query(&["LRANGE", key, "0", "-1"]);
        items.reverse();
        items
    }
}

fn spawn_server(dir: &Path, socket: &Path, extra: &[String]) -> Child {
    match Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(socket)
        .args(["--unixsocketperm", "700", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!(
            "cannot start `redis-server` ({e}); these integration tests need it on the PATH.\n\
             Install it: `apt-get install redis-server` (Debian/Ubuntu), `brew install redis` (macOS)."
        ),
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `ruled`, its stderr collected line by line.
#[derive(Debug)]
pub struct Ruled {
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
    /// Reads stderr into `log` until ruled exits.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Ruled {
    /// Starts `ruled` against `redis` with `bundle` and extra flags.
    pub fn start(redis: &RedisServer, bundle: &Path, extra: &[&str]) -> Self {
        Self::start_with(&redis.url(), bundle, extra, &[])
    }

    /// Starts `ruled --redis url` with `bundle`, extra flags and extra
    /// environment variables.
    pub fn start_with(url: &str, bundle: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let program = Command::new(env!("CARGO_BIN_EXE_ruled"));
        Self::start_program(program, url, bundle, extra, env)
    }

    /// [`Ruled::start_with`] for a `ruled` that `command` starts: another
    /// build of it, or an emulator running one (tests/dist_smoke.rs).
    pub fn start_program(
        mut command: Command,
        url: &str,
        bundle: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        command.arg("--redis").arg(url).arg("--bundle").arg(bundle);
        // Test defaults, unless the test sets them itself.
        if !extra.contains(&"--log-level") {
            command.args(["--log-level", "debug"]);
        }
        if !extra.contains(&"--stats-interval") {
            command.args(["--stats-interval", "200ms"]);
        }
        command
            .args(extra)
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars() {
            if key.starts_with("RULED_") {
                command.env_remove(key);
            }
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn ruled");
        let stderr = child.stderr.take().expect("stderr piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if std::env::var_os("RULED_TEST_ECHO").is_some() {
                    eprintln!("ruled: {line}");
                }
                sink.lock().expect("log lock").push(line);
            }
        });
        Self {
            child: Some(child),
            log,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    pub fn log_text(&self) -> String {
        self.log().join("\n")
    }

    /// Waits for a log line containing every one of `needles`.
    pub fn wait_log(&self, needles: &[&str]) -> String {
        self.wait_log_within(DEADLINE, needles)
    }

    /// [`Ruled::wait_log`] with its own deadline (an emulated `ruled` is
    /// slower).
    pub fn wait_log_within(&self, deadline: Duration, needles: &[&str]) -> String {
        let found = poll_within(deadline, || {
            self.log()
                .into_iter()
                .find(|line| needles.iter().all(|n| line.contains(n)))
        });
        found.unwrap_or_else(|| {
            panic!(
                "no log line with {needles:?} within {deadline:?}; log:\n{}",
                self.log_text()
            )
        })
    }

    /// Waits until ruled says it is ready (subscribed, or idle).
    pub fn wait_ready(&self) {
        self.wait_log(&["ruled ready"]);
    }

    /// [`Ruled::start`], then [`Ruled::wait_ready`].
    pub fn ready(redis: &RedisServer, bundle: &Path, extra: &[&str]) -> Self {
        let ruled = Self::start(redis, bundle, extra);
        ruled.wait_ready();
        ruled
    }

    /// SIGTERM, then waits for the exit; returns whether it exited cleanly.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let status = wait_child(&mut child);
        self.read_to_end();
        status.is_some_and(|s| s.success())
    }

    /// After the exit: waits (bounded) until every line ruled wrote is in
    /// the log, so a test reading it right after the exit sees them all.
    fn read_to_end(&mut self) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        if poll(|| reader.is_finished().then_some(())).is_some() {
            let _ = reader.join();
        }
    }

    /// SIGKILL: a crash.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to exit by itself; returns its status code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let status = wait_child(&mut child);
        self.read_to_end();
        status.and_then(|s| s.code())
    }
}

fn wait_child(child: &mut Child) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Ruled {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A test's own Redis, temp dir, and bundle file `b` in that dir.
#[derive(Debug)]
pub struct Setup {
    pub redis: RedisServer,
    pub dir: tempfile::TempDir,
    pub bundle: PathBuf,
}

impl Setup {
    pub fn new(payload: &rulecore::bundle::Payload) -> Self {
        Self::with(|_| payload.clone())
    }

    /// Like [`Setup::new`], for a payload that refers to files (scripts)
    /// it writes into the temp dir first.
    pub fn with(make: impl FnOnce(&Path) -> rulecore::bundle::Payload) -> Self {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let payload = make(dir.path());
        let bundle = bundles::write(dir.path(), "b", &payload);
        Self { redis, dir, bundle }
    }
}

/// A current-thread tokio runtime, as `ruled` runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// How many times Redis ran `command` (`INFO commandstats`).
pub fn commandstat(redis: &RedisServer, command: &str) -> u64 {
    let info: String = redis.query(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Writes an executable `#!/bin/sh` script `dir/name`; returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make script executable");
    path.to_string_lossy().into_owned()
}

/// A script that writes its pid to `dir/name.pid` and then sleeps for ten
/// minutes (holding a worker); returns (command, pid file).
pub fn busy_script(dir: &Path, name: &str) -> (String, PathBuf) {
    let pid_file = dir.join(format!("{name}.pid"));
    let body = format!("echo $$ > {}\nexec sleep 600", pid_file.display());
    (script(dir, name, &body), pid_file)
}

/// Waits until a script has written its pid (a whole line) to `path`.
pub fn wait_pid(path: &Path) -> i32 {
    let pid = poll(|| {
        let text = std::fs::read_to_string(path).ok()?;
        text.ends_with('\n').then(|| text.trim().parse().ok())?
    });
    pid.unwrap_or_else(|| panic!("no pid in {} within {DEADLINE:?}", path.display()))
}

/// The list `key`, oldest first (LPUSH prepends).
pub fn list(redis: &RedisServer, key: &str) -> Vec<String> {
    let mut items: Vec<String> = redis.query(&["LRANGE", key, "0", "-1"]);
    items.reverse();
    items
}

/// The wall clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .expect("clock after 1970")
}

/// Polls `check` every 20 ms until it returns `Some`, or [`DEADLINE`] passes.
pub fn poll<T>(check: impl FnMut() -> Option<T>) -> Option<T> {
    poll_within(DEADLINE, check)
}

/// [`poll`] until `deadline` passes.
pub fn poll_within<T>(deadline: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if started.elapsed() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls until `check` is true; panics with `what` after [`DEADLINE`].
pub fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    if poll(|| check().then_some(())).is_none() {
        panic!("timed out after {DEADLINE:?} waiting for: {what}");
    }
}

/// Whether a process is still running (a zombie has exited: it only waits
/// for its parent to reap it).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// `redis-cli MONITOR` on a server: every command it runs, in the order it
/// ran them, one line each (`<time> [0 unix:...] "HDEL" "key" ...`).
#[derive(Debug)]
pub struct Monitor {
    child: Child,
    out: PathBuf,
}

impl Monitor {
    /// Starts monitoring; returns once the server has confirmed (`OK`), so
    /// every command from then on is seen.
    pub fn start(redis: &RedisServer, out: PathBuf) -> Self {
        let file = std::fs::File::create(&out).expect("monitor output file");
        let child = Command::new("redis-cli")
            .arg("-s")
            .arg(&redis.socket)
            .arg("MONITOR")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-cli MONITOR (comes with redis-server)");
        let monitor = Self { child, out };
        wait_for("MONITOR confirmed", || {
            monitor.lines().first().is_some_and(|l| l == "OK")
        });
        monitor
    }

    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Every command seen so far: its time (µs since the Unix epoch) and
    /// its arguments.
    pub fn commands(&self) -> Vec<(i64, Vec<String>)> {
        self.lines()
            .iter()
            .filter_map(|line| monitor_command(line))
            .collect()
    }

    /// The position of the first line holding every one of `needles`.
    pub fn position(&self, needles: &[&str]) -> Option<usize> {
        self.lines()
            .iter()
            .position(|line| needles.iter().all(|n| line.contains(n)))
    }
}

/// A MONITOR line `1796056530.756741 [0 unix:/x.sock] "LPUSH" "k" "v"`:
/// its time in µs and its arguments.
pub fn monitor_command(line: &str) -> Option<(i64, Vec<String>)> {
    let (stamp, rest) = line.split_once(' ')?;
    let (secs, micros) = stamp.split_once('.')?;
    let at_us = secs.parse::<i64>().ok()? * 1_000_000 + micros.parse::<i64>().ok()?;
    let rest = &rest[rest.find("] ")? + 2..];
    let mut args = Vec::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => arg.push(chars.next()?),
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    Some((at_us, args))
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Ruled {
    /// Sends `signal` to ruled (it keeps running unless the signal stops it).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal ruled");
    }

    /// How many log lines contain every one of `needles`.
    pub fn count_log(&self, needles: &[&str]) -> usize {
        self.log()
            .iter()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .count()
    }
}

/// Writes `bytes` to `path` as a deploy does: a new file renamed over it.
pub fn replace_by_rename(path: &Path, bytes: &[u8]) {
    let next = path.with_extension("next");
    std::fs::write(&next, bytes).expect("write the new bundle");
    std::fs::rename(&next, path).expect("rename the new bundle into place");
}

/// `args` as one command on `con` (a connection of the test's or the
/// benchmark's own, kept between commands), its reply as `T`.
pub fn query<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&str]) -> T {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// As redis-ipc writes a field: `HSET` and `PUBLISH` in one pipeline.
pub fn announce(con: &mut redis::Connection, hash: &str, field: &str, value: &str) {
    redis::pipe()
        .cmd("HSET")
        .arg(hash)
        .arg(field)
        .arg(value)
        .ignore()
        .cmd("PUBLISH")
        .arg(hash)
        .arg(field)
        .ignore()
        .query::<()>(con)
        .expect("HSET + PUBLISH");
}

/// The `field` (`VmRSS:`, `VmHWM:`, `RssFile:`) of `/proc/<pid>/status`,
/// in KiB: the benches' memory figures.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}
