//! Signals (docs/service.md#signals): no signal that can be caught ends
//! `ruled` without the orderly stop. `SIGTERM`, `SIGINT` and `SIGQUIT`
//! stop it in order, `SIGHUP` reloads the bundle, and every other signal
//! whose default action would end the process is caught and logged.
//! Program faults (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGABRT`,
//! `SIGTRAP`, `SIGSYS`) keep their default: nothing can safely continue
//! after one. `SIGPIPE` is ignored by the Rust runtime already.

use std::future::Future;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, oneshot};

/// A signal listener could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for {name}: {source}")]
pub struct SignalError {
    name: &'static str,
    source: std::io::Error,
}

/// Why `ruled` stops.
const STOP: [(&str, i32); 3] = [
    ("SIGTERM", libc::SIGTERM),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
];

/// Caught so that they do not end the process, and only logged.
const IGNORED: [(&str, i32); 10] = [
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGALRM", libc::SIGALRM),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGPROF", libc::SIGPROF),
    ("SIGIO", libc::SIGIO),
    ("SIGPWR", libc::SIGPWR),
    ("SIGSTKFLT", libc::SIGSTKFLT),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
];

fn listen(name: &'static str, number: i32) -> Result<Signal, SignalError> {
    signal(SignalKind::from_raw(number)).map_err(|source| SignalError { name, source })
}

/// Installs every listener at once, from the moment it is called (not
/// from the first poll), so a signal during start is not the default
/// "die". Returns the stop future and the reload requests (one per
/// `SIGHUP`). Must be called inside the tokio runtime.
pub fn install() -> Result<(impl Future<Output = ()>, mpsc::UnboundedReceiver<()>), SignalError> {
    let [(term_name, term), (int_name, int), (quit_name, quit)] = STOP;
    let mut term = listen(term_name, term)?;
    let mut int = listen(int_name, int)?;
    let mut quit = listen(quit_name, quit)?;
    let mut hangup = listen("SIGHUP", libc::SIGHUP)?;
    for (name, number) in IGNORED {
        let mut ignored = listen(name, number)?;
        tokio::spawn(async move {
            while ignored.recv().await.is_some() {
                tracing::warn!(signal = name, "{name} received and ignored");
            }
        });
    }
    let (reload_tx, reloads) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the bundle");
            if reload_tx.send(()).is_err() {
                return;
            }
        }
    });
    // The three listeners are watched by a task of their own, and the
    // stop future only waits for its word: the driver polls that future at
    // every wake-up, and a oneshot costs far less to poll than three
    // signal streams (docs/engine.md#cpu-per-notification).
    let (stopped, stop_word) = oneshot::channel();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => term_name,
            _ = int.recv() => int_name,
            _ = quit.recv() => quit_name,
        };
        tracing::info!("{name} received");
        // The driver gone already: nothing is left to stop.
        let _ = stopped.send(());
    });
    let stop = async move {
        // A dropped sender (the runtime shutting down) stops too.
        let _ = stop_word.await;
    };
    Ok((stop, reloads))
}
