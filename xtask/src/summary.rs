//! The test run's counts, read from the runner's own closing lines, so that
//! `cargo xtask ci` ends with one line `N passed, N failed, N skipped`
//! whatever ran before it (docs/README.md's CI notes, README.md#developing).

use anyhow::{Context, Result};
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

/// What a test run counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
    /// Whether any closing line was read: without one, nothing is known.
    pub(crate) seen: bool,
    /// A nextest summary was read: it counts the whole run, and the
    /// libtest lines in captured test output count nothing.
    whole_run: bool,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

impl Counts {
    /// Adds what one line of the runner's output counts: nextest's
    /// `Summary [...] N tests run: N passed, N failed, N skipped` (once per
    /// run), or libtest's `test result: ... N passed; N failed; N ignored`
    /// (once per test binary, added up).
    pub(crate) fn read_line(&mut self, line: &str) {
        if let Some(rest) = line.trim_start().strip_prefix("Summary [") {
            // `N tests run: ...`, or `N/M tests run: ...` when cancelled.
            let Some((_, items)) = rest
                .split_once(" tests run: ")
                .or_else(|| rest.split_once(" test run: "))
            else {
                return;
            };
            // One summary per run: the last one read is the run's.
            *self = Counts {
                seen: true,
                whole_run: true,
                ..Counts::default()
            };
            self.add_items(items.split(", "), "skipped");
        } else if let Some(rest) = line
            .strip_prefix("test result: ")
            .filter(|_| !self.whole_run)
        {
            // Unindented: libtest's own line, not one in captured output.
            // `ok. 5 passed; 0 failed; 1 ignored; 0 measured; ...`
            let Some((_, items)) = rest.split_once(". ") else {
                return;
            };
            self.seen = true;
            self.add_items(items.split("; "), "ignored");
        }
    }

    /// Adds items `N label` (`1190 passed (3 slow)`, `2 timed out`).
    fn add_items<'a>(&mut self, items: impl Iterator<Item = &'a str>, skipped: &str) {
        for item in items {
            let Some((number, label)) = item.trim().split_once(' ') else {
                continue;
            };
            let Ok(n) = number.parse::<u64>() else {
                continue;
            };
            if label.starts_with("passed") {
                self.passed += n;
            } else if ["failed", "timed out", "exec fail"]
                .iter()
                .any(|failed| label.starts_with(failed))
            {
                self.failed += n;
            } else if label.starts_with(skipped) {
                self.skipped += n;
            }
        }
    }
}

/// Runs `command` (a test runner), its stdout and stderr passed through as
/// they come, and returns its exit status with the counts it printed.
pub(crate) fn run_counted(what: &str, mut command: Command) -> Result<(ExitStatus, Counts)> {
    eprintln!("==> {what}");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start: {what}"))?;
    let counts = Arc::new(Mutex::new(Counts::default()));
    let stdout = child.stdout.take().context("the runner's stdout")?;
    let stderr = child.stderr.take().context("the runner's stderr")?;
    let to_stdout = pass_through(stdout, Arc::clone(&counts), false);
    let to_stderr = pass_through(stderr, Arc::clone(&counts), true);
    let status = child
        .wait()
        .with_context(|| format!("waiting for: {what}"))?;
    for reader in [to_stdout, to_stderr] {
        reader
            .join()
            .map_err(|_| anyhow::anyhow!("the output reader of {what} panicked"))?;
    }
    let counts = *counts
        .lock()
        .map_err(|_| anyhow::anyhow!("the counts of {what}"))?;
    Ok((status, counts))
}

/// A thread copying `from` line by line to this process's stdout (or
/// stderr), counting each line into `counts`.
fn pass_through(
    from: impl std::io::Read + Send + 'static,
    counts: Arc<Mutex<Counts>>,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if let Ok(mut counts) = counts.lock() {
                counts.read_line(&line);
            }
            // A closed terminal ends the copy, not the run.
            let written = if to_stderr {
                writeln!(std::io::stderr(), "{line}")
            } else {
                writeln!(std::io::stdout(), "{line}")
            };
            if written.is_err() {
                break;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(output: &str) -> Counts {
        let mut counts = Counts::default();
        output.lines().for_each(|line| counts.read_line(line));
        counts
    }

    #[test]
    fn nextest_summary_lines_are_read() {
        // As nextest 0.9 prints them (stderr, no colour).
        let output = "        PASS [   0.310s] (1/3) xtask::bin/xtask dist::archive::tests::a\n\
                      ────────────\n     \
                      Summary [  18.663s] 3 tests run: 2 passed, 1 failed, 18 skipped\n        \
                      FAIL [   0.984s] (2/3) xtask::bin/xtask dist::archive::tests::b\n\
                      error: test run failed\n";
        let counts = counted(output);
        assert_eq!(counts.to_string(), "2 passed, 1 failed, 18 skipped");
        assert!(counts.seen);
        let slow = counted(
            "     Summary [ 312.004s] 1204 tests run: 1190 passed (3 slow), 6 failed, 2 timed out, 40 skipped",
        );
        assert_eq!(slow.to_string(), "1190 passed, 8 failed, 40 skipped");
        let one = counted("     Summary [   0.005s] 1 test run: 1 passed, 0 skipped");
        assert_eq!(one.to_string(), "1 passed, 0 failed, 0 skipped");
        let cancelled =
            counted("     Summary [   0.240s] 2/3 tests run: 0 passed, 2 failed, 23 skipped");
        assert_eq!(cancelled.to_string(), "0 passed, 2 failed, 23 skipped");
    }

    #[test]
    fn libtest_result_lines_are_added_up() {
        let output = "test a ... ok\n\
                      test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
                      test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.20s\n";
        assert_eq!(counted(output).to_string(), "7 passed, 3 failed, 1 skipped");
    }

    /// The counts come through the pipes, from either stream, while the
    /// lines still reach the terminal.
    #[test]
    fn a_run_is_counted_through_its_pipes() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "echo 'test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured'; \
             echo '     Summary [   1.000s] 4 tests run: 3 passed, 1 failed, 2 skipped' >&2; \
             exit 100",
        ]);
        let (status, counts) = run_counted("a stand-in runner", command).unwrap();
        assert_eq!(status.code(), Some(100));
        // nextest's summary is the run's: it replaces what came before.
        assert_eq!(counts.to_string(), "3 passed, 1 failed, 2 skipped");
    }

    /// nextest shows a failed test's captured output, libtest's closing
    /// line in it, indented: that is not a count of the run.
    #[test]
    fn captured_libtest_lines_are_not_counted() {
        let output = "    test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured\n     \
                      Summary [   0.240s] 3 tests run: 2 passed, 1 failed, 23 skipped\n";
        assert_eq!(
            counted(output).to_string(),
            "2 passed, 1 failed, 23 skipped"
        );
    }

    #[test]
    fn other_lines_count_nothing() {
        let counts = counted("test summary of the day\nSummary: nothing\n3 passed, 1 failed\n");
        assert_eq!(counts, Counts::default());
    }
}
