//! A small LSP client that drives the real `rulec lsp` binary over stdio,
//! as an editor does: Content-Length framed JSON-RPC, requests answered in
//! order, notifications kept until asked for. Every wait has a generous
//! deadline and fails the test with what was seen instead of hanging.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each user uses a part

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long any one answer may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    /// Notifications read while waiting for something else.
    kept: VecDeque<Value>,
    next_id: i64,
}

/// Reads framed messages from `stdout` until it closes.
fn read_messages(stdout: impl Read) -> impl Iterator<Item = Value> {
    let mut reader = BufReader::new(stdout);
    std::iter::from_fn(move || {
        let mut length = None;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(value) = line.strip_prefix("Content-Length: ") {
                length = value.parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length?];
        reader.read_exact(&mut body).ok()?;
        serde_json::from_slice(&body).ok()
    })
}

impl Client {
    /// Starts `rulec lsp ARGS` in `cwd` and initializes it.
    pub fn start(rulec: &Path, cwd: &Path, args: &[&str]) -> Client {
        Client::start_with_env(rulec, cwd, args, &[])
    }

    /// [`Client::start`] with more variables in the server's environment.
    pub fn start_with_env(
        rulec: &Path,
        cwd: &Path,
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> Client {
        let mut child = Command::new(rulec)
            .arg("lsp")
            .args(args)
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rulec lsp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, messages) = channel();
        std::thread::spawn(move || {
            for message in read_messages(stdout) {
                if sender.send(message).is_err() {
                    break;
                }
            }
        });
        let mut client = Client {
            child,
            stdin,
            messages,
            kept: VecDeque::new(),
            next_id: 1,
        };
        let root = Value::String(url(cwd));
        let result = client.request(
            "initialize",
            json!({
                "processId": null,
                "rootUri": root,
                "capabilities": {
                    "textDocument": {
                        "publishDiagnostics": { "versionSupport": true },
                        "hover": { "contentFormat": ["markdown", "plaintext"] },
                    },
                },
            }),
        );
        assert!(
            result["capabilities"]["hoverProvider"]
                .as_bool()
                .unwrap_or(false),
            "{result}"
        );
        client.notify("initialized", json!({}));
        client
    }

    fn write(&mut self, message: &Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Writes `bytes` as they are: a message framed by hand, or junk.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Frames and writes any JSON `message` (a malformed request too).
    pub fn send(&mut self, message: &Value) {
        self.write(message);
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The whole response with `id` (`null` for a message the server could
    /// not read an id from), kept or still to come.
    pub fn response(&mut self, id: &Value) -> Value {
        let matches =
            |message: &Value| message.get("method").is_none() && message.get("id") == Some(id);
        if let Some(at) = self.kept.iter().position(matches) {
            return self.kept.remove(at).unwrap();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let message = self.next(deadline, &format!("the response to {id}"));
            if matches(&message) {
                return message;
            }
            self.kept.push_back(message);
        }
    }

    /// The params of the first notification `method`, kept or still to come.
    pub fn notification(&mut self, method: &str) -> Value {
        let matches = |message: &Value| message["method"] == method && message.get("id").is_none();
        if let Some(at) = self.kept.iter().position(matches) {
            return self.kept.remove(at).unwrap()["params"].clone();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let message = self.next(deadline, method);
            if matches(&message) {
                return message["params"].clone();
            }
            self.kept.push_back(message);
        }
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// The next message from the server, within the deadline.
    fn next(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.messages.recv_timeout(left) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "no {waiting_for} within {DEADLINE:?}; kept: {:?}",
                    self.kept
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("rulec lsp closed stdout while waiting for {waiting_for}")
            }
        }
    }

    /// Sends a request and returns its result (a server error fails).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + DEADLINE;
        loop {
            let message = self.next(deadline, method);
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
            self.kept.push_back(message);
        }
    }

    /// The first `textDocument/publishDiagnostics` for `uri` (at `version`
    /// when given), kept or still to come; earlier ones for it are dropped.
    pub fn diagnostics(&mut self, uri: &str, version: Option<i64>) -> Vec<Value> {
        let matches = |message: &Value| {
            message["method"] == "textDocument/publishDiagnostics"
                && message["params"]["uri"] == uri
                && version.is_none_or(|v| message["params"]["version"] == json!(v))
        };
        if let Some(at) = self.kept.iter().position(matches) {
            let message = self.kept.remove(at).unwrap();
            return message["params"]["diagnostics"].as_array().unwrap().clone();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let message = self.next(deadline, &format!("diagnostics for {uri}"));
            if matches(&message) {
                return message["params"]["diagnostics"].as_array().unwrap().clone();
            }
            self.kept.push_back(message);
        }
    }

    /// `shutdown`, `exit`, and the server's exit status.
    pub fn stop(mut self) -> ExitStatus {
        self.request("shutdown", Value::Null);
        self.notify("exit", Value::Null);
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "rulec lsp did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A failed test must not leave the server running.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `file://` URI of a path.
pub fn url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Applies protocol edits (line/UTF-16 column ranges) to `text`, the last
/// first, as an editor applies a code action.
pub fn apply_edits(text: &str, edits: &[Value]) -> String {
    let offset = |position: &Value| {
        let line = position["line"].as_u64().unwrap() as usize;
        let character = position["character"].as_u64().unwrap() as usize;
        let start: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
        let mut units = 0;
        for (at, c) in text[start..].char_indices() {
            if units >= character || c == '\n' {
                return start + at;
            }
            units += c.len_utf16();
        }
        text.len()
    };
    let mut edits: Vec<&Value> = edits.iter().collect();
    edits.sort_by_key(|edit| std::cmp::Reverse(offset(&edit["range"]["start"])));
    let mut text = text.to_string();
    for edit in edits {
        let (start, end) = (
            offset(&edit["range"]["start"]),
            offset(&edit["range"]["end"]),
        );
        text.replace_range(start..end, edit["newText"].as_str().unwrap());
    }
    text
}
