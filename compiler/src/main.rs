//! `rulec`: parses the command line and calls the library (docs/rulec.md).
//! Each subcommand is one library function; nothing else lives here.

use clap::Parser;
use rulec::cli::{Cli, Command, Console, Exit};
use rulec::diagnostic::TextStyle;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The language server writes stdout from a thread of its own: it must
    // start before stdout is locked here.
    if let Command::Lsp(args) = &cli.command {
        return match rulec::lsp::run(args, &mut std::io::stderr()) {
            Ok(exit) => exit.into(),
            Err(_) => Exit::Usage.into(),
        };
    }
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    // https://no-color.org: colour only on a terminal, and never when asked not to.
    let style = if stderr.is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        TextStyle::Fancy
    } else {
        TextStyle::Plain
    };
    let (mut out, mut err) = (stdout.lock(), stderr.lock());
    let mut console = Console {
        out: &mut out,
        err: &mut err,
        style,
        noted: Default::default(),
    };
    let result = match cli.command {
        Command::Check(args) => rulec::check::run(&args, &mut console),
        Command::Build(args) => rulec::build::run(&args, &mut console),
        Command::Dump(args) => rulec::dump::run(&args, &mut console),
        Command::Schema(args) => rulec::schema::run(&args, &mut console),
        Command::Simulate(args) => rulec::simulate::run(&args, &mut console),
        Command::Diff(args) => rulec::diff::run(&args, &mut console),
        Command::Fix(args) => rulec::fix::run(&args, &mut console),
        Command::Test(args) => rulec::rule_test::run(&args, &mut console),
        // Served above, before stdout was locked.
        Command::Lsp(_) => Ok(Exit::Success),
    };
    match result {
        Ok(exit) => exit.into(),
        // The reader stopped early (`rulec dump ... | head`): it has what it
        // wanted, so this is no failure and nothing to say.
        Err(error) if reader_went_away(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // Writing the output failed (e.g. a closed pipe); say so if we can.
            let _ = writeln!(err, "rulec: cannot write output: {error}");
            Exit::Usage.into()
        }
    }
}

/// Whether writing failed because the reader closed the pipe, also when the
/// error comes wrapped (serde_json's writer wraps the `io::Error` it got).
fn reader_went_away(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    if error.kind() == BrokenPipe {
        return true;
    }
    let mut cause = error.get_ref().map(|inner| inner as &dyn std::error::Error);
    while let Some(inner) = cause {
        if let Some(json) = inner.downcast_ref::<serde_json::Error>() {
            return json.io_error_kind() == Some(BrokenPipe);
        }
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return io.kind() == BrokenPipe;
        }
        cause = inner.source();
    }
    false
}
