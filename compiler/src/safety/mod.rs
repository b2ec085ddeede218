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
use crate::envelope::EnvelopeDecls;
use crate::profile::Catalogue;
use crate::validate::CheckedRule;
use rulecore::bundle::Action;
use rulecore::envelope::Cover;

/// The loops and conflicts of `rules` (the rules that survived checking,
/// in bundle order), held against the profile's catalogue.
pub fn check(rules: &[CheckedRule], catalogue: Option<&Catalogue>) -> Vec<Diagnostic> {
    let inputs = cause::input_channels(rules);
    let mut out = loops::check(rules, catalogue, &inputs);
    out.extend(conflict::check(rules, catalogue));
    out
}

/// `rulec::guarded` for `rules` under every guard of `envelope` (the
/// profile's and the rules directory's).
pub fn check_guards(
    rules: &[CheckedRule],
    envelope: &EnvelopeDecls,
    catalogue: Option<&Catalogue>,
) -> Vec<Diagnostic> {
    let views: Vec<GuardView<'_>> = envelope
        .guards
        .iter()
        .map(|guard| GuardView {
            name: &guard.name,
            file: &guard.file,
            when_text: &guard.when_text,
            when: &guard.when.expr,
            // A rule file's guard is labelled where its `when` is written;
            // a profile's file is not among the rules' sources.
            when_span: (!guard.from_profile).then(|| guard.when_span.clone()),
            covers: Box::new(move |action| covers(&guard.cover, action)),
        })
        .collect();
    guarded::check(rules, &views, catalogue)
}

/// Whether `cover` takes in `action` with its value as written; a
/// computed value may be any, so only the target is asked then.
fn covers(cover: &Cover, action: &Action) -> bool {
    match action.texts().next().and_then(cause::plain) {
        Some(value) => cover.covers(action, value),
        None => Cover {
            target: cover.target.clone(),
            values: Vec::new(),
        }
        .covers(action, ""),
    }
}
