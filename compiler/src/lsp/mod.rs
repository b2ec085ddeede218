//! `rulec lsp` (docs/editors.md): a language server for rules directories
//! over stdio (LSP 3.17), on `lsp-server` and `lsp-types`: synchronous, so
//! `rulec` links no async runtime (tower-lsp would bring tokio, which
//! `cargo xtask invariants` keeps out of `rulec`).
//!
//! Every diagnostic is `rulec check`'s own ([`crate::session::Session::check_loaded`]
//! over the directory, the open buffers laid over its files) or, for a
//! timeline or test, what the simulator's and `rulec test`'s parsers
//! report; the server only places them and offers their fixes.
//!
//! Layout: `transport` the bounded reading of the client's messages;
//! `server` the message loop and the answers; `workspace` the open
//! documents, the directories and what was published; `diagnostics`
//! positions and quick fixes; `timeline` timeline and test files;
//! `scan` and `context` where the cursor is; `facts` what hover and
//! completion say; `hover`, `complete`, `definition`, `profile_copy` the built-in
//! profile's files for it; `text` protocol
//! positions.

mod complete;
mod context;
mod definition;
mod diagnostics;
mod facts;
mod hover;
mod profile_copy;
mod scan;
mod server;
mod text;
mod timeline;
mod transport;
mod workspace;

use crate::check::ProfileArgs;
use crate::cli::Exit;
use std::io::{self, Write};
use std::sync::Arc;

/// `rulec lsp` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec lsp                       (started by an editor, which talks to it on stdin/stdout)
  rulec lsp --profile none
  rulec lsp --profile ./my-profile

Diagnostics as you type (the same as `rulec check` on the file's directory,
and for timelines and tests what `rulec simulate` and `rulec test` report),
hover, completion, go to definition and quick fixes. A TOML file outside
a rules folder (a Cargo.toml) is left alone. Each message and each
document is bounded at 16 MiB; a malformed message gets a JSON-RPC error
and the server goes on. Setting it up in VS Code, Neovim and Helix:
docs/editors.md.

Exit status: 0 after the editor's `shutdown` and `exit`, 2 when the profile
cannot be read or the connection breaks.")]
pub struct LspArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Accepted for editors that always pass it: stdio is the only transport.
    #[arg(long)]
    pub stdio: bool,
}

/// Runs `rulec lsp` on stdin and stdout until the editor exits; problems
/// starting it go to `err`.
pub fn run(args: &LspArgs, err: &mut dyn Write) -> io::Result<Exit> {
    let profile = match crate::profile::load(&args.profile.profile) {
        Ok(profile) => profile.map(Arc::new),
        Err(error) => {
            writeln!(err, "error: {error}")?;
            return Ok(Exit::Usage);
        }
    };
    let (incoming, reader) = transport::stdin();
    let mut stdout = io::stdout().lock();
    let served = server::serve(&incoming, &mut stdout, workspace::Workspace::new(profile));
    if let Err(error) = served {
        writeln!(err, "rulec lsp: {error}")?;
        return Ok(Exit::Usage);
    }
    // Served to the end: the reader has stopped (after `exit`, or at the
    // end of stdin), so joining it does not wait for the client.
    match reader.join() {
        Ok(Ok(())) => Ok(Exit::Success),
        Ok(Err(error)) => {
            writeln!(err, "rulec lsp: reading stdin: {error}")?;
            Ok(Exit::Usage)
        }
        Err(_) => {
            writeln!(err, "rulec lsp: the reader thread panicked")?;
            Ok(Exit::Usage)
        }
    }
}

#[cfg(test)]
mod tests;
