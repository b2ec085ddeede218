//! The safety checks of a rules directory as a whole
//! (docs/safety-checks.md): what the rules together can do to the
//! scooter, found before it runs them. `cause` (what an action makes
//! happen on the bus, from the profile's `effects`), `facts` (what a
//! condition says for sure), `loops` (`rulec::loop`), `conflict`
//! (`rulec::conflict`), `guarded` (`rulec::guarded`). Warnings only: the runtime's envelope enforces,
//! these tell the author first.

mod cause;
mod conflict;
mod facts;
mod guarded;
mod loops;

pub use guarded::GuardView;

use crate::diagnostic::Diagnostic;
use crate::profile::Catalogue;
use crate::validate::CheckedRule;

/// Every safety warning of `rules` (the rules that survived checking,
/// in bundle order), held against the profile's catalogue and `guards`.
pub fn check(
    rules: &[CheckedRule],
    catalogue: Option<&Catalogue>,
    guards: &[GuardView<'_>],
) -> Vec<Diagnostic> {
    let inputs = cause::input_channels(rules);
    let mut out = loops::check(rules, catalogue, &inputs);
    out.extend(conflict::check(rules, catalogue));
    out.extend(guarded::check(rules, guards, catalogue));
    out
}
