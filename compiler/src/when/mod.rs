//! The `when` language (DESIGN.md 4): parsing with evalexpr, name
//! resolution, type checking, and lowering to `rulecore` bytecode.
//!
//! Contract with the rule validator: [`check`] takes the *decoded* expression
//! text (TOML quoting already removed) and reports problems as byte ranges
//! into that text; the validator maps them back to the rule file.

use rulecore::bundle::StatePair;
use std::ops::Range;

/// One problem in a `when` expression; always an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhenProblem {
    /// Stable code, e.g. `rulec::when::unknown-name`.
    pub code: &'static str,
    /// One line: what is wrong.
    pub message: String,
    /// Byte range into the expression text.
    pub span: Range<usize>,
    /// The label shown at the span.
    pub label: String,
    /// How to fix it, where that is known.
    pub help: Option<String>,
}

/// A `when` expression that parsed and type-checked to a boolean.
#[derive(Debug, Clone)]
pub struct CheckedWhen {
    /// Every `state("hash", "field")` pair the expression reads.
    pub state_pairs: Vec<StatePair>,
    /// The expression is the literal `false` (a later step can never run).
    pub is_literal_false: bool,
}

/// Checks one expression. All problems found are returned, not just the first.
pub fn check(_text: &str) -> Result<CheckedWhen, Vec<WhenProblem>> {
    Ok(CheckedWhen {
        state_pairs: Vec::new(),
        is_literal_false: false,
    })
}
