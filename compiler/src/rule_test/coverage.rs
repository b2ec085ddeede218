//! `rulec test --coverage` (docs/rulec.md#coverage): what the tests'
//! simulations did to each rule, counted from their output lines (which
//! rules matched and started runs, which steps were reached, what each
//! `when` gave), and where each part is written (`sources`), for the
//! table, the JSON object (`report`) and the lcov file (`lcov`).

mod lcov;
mod report;
mod sources;
mod tally;

pub use lcov::render as lcov;
pub use report::{json, text};
pub use sources::{RuleLines, StepLines};

use crate::cli::Console;
use rulecore::bundle::{Payload, Step};
use ruled_engine::sim::Line;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a `when` was seen to give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    pub seen_true: u64,
    /// Errors included: an evaluation error counts as false
    /// (docs/semantics.md#handling-one-event).
    pub seen_false: u64,
    /// Of `seen_false`, the evaluation errors (the rule's own `when`
    /// only: a step's error is not told apart in the output).
    pub errors: u64,
}

impl Outcomes {
    /// Times the `when` was evaluated.
    pub fn evaluated(&self) -> u64 {
        self.seen_true + self.seen_false
    }
}

/// One step (or finally step).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepCoverage {
    /// Times a run came to the step and judged it: its action started
    /// (once however often Redis refused it whole), its value failed to
    /// compute, or its `when` was false.
    pub reached: u64,
    /// `None`: the step has no `when`.
    pub when: Option<Outcomes>,
}

impl StepCoverage {
    fn of(step: &Step) -> Self {
        Self {
            reached: 0,
            when: step.when.as_ref().map(|_| Outcomes::default()),
        }
    }
}

/// One rule over every test of its rules directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCoverage {
    pub name: String,
    pub enabled: bool,
    /// Where its parts are written; `None` when the rules are a bundle.
    pub lines: Option<RuleLines>,
    /// Events that matched its `on` (each decision once: a debounced or
    /// held event is not counted again when its window ends).
    pub matched: u64,
    /// Runs started: the rule triggered.
    pub runs: u64,
    /// `None`: the rule has no `when`.
    pub when: Option<Outcomes>,
    pub steps: Vec<StepCoverage>,
    pub finally: Vec<StepCoverage>,
    // Guards and limits (not built yet) get their refusals here when they
    // exist: each is a non-fire reason of its own, counted in `tally`
    // beside `cooldown`, and a line of the rule file like a `when`.
}

/// Every rule of one rules directory over the tests run against it.
#[derive(Debug, Clone)]
pub struct Coverage {
    /// The rules directory (or file, or bundle) as the tests named it.
    pub path: PathBuf,
    /// Test files simulated against it (passed or failed).
    pub tests: usize,
    /// In bundle order.
    pub rules: Vec<RuleCoverage>,
    payload: Arc<Payload>,
}

impl Coverage {
    /// Nothing covered yet; `lines` from the rule files (`None` for a
    /// bundle).
    fn new(path: &Path, payload: Arc<Payload>, mut lines: Option<Vec<Option<RuleLines>>>) -> Self {
        let rules = payload
            .rules
            .iter()
            .enumerate()
            .map(|(index, rule)| RuleCoverage {
                name: rule.name.to_string(),
                enabled: rule.enabled,
                lines: lines
                    .as_mut()
                    .and_then(|lines| lines.get_mut(index))
                    .and_then(Option::take),
                matched: 0,
                runs: 0,
                when: rule.when.as_ref().map(|_| Outcomes::default()),
                steps: rule.steps.iter().map(StepCoverage::of).collect(),
                finally: rule.finally().iter().map(StepCoverage::of).collect(),
            })
            .collect();
        Self {
            path: path.to_path_buf(),
            tests: 0,
            rules,
            payload,
        }
    }

    /// Counts what one test's simulation printed.
    pub fn record(&mut self, lines: &[Line]) {
        self.tests += 1;
        tally::Tally::new(&self.payload, &mut self.rules).lines(lines);
    }
}

/// The coverage of every rules directory the tests ran against, in the
/// order they were first met.
#[derive(Debug, Default)]
pub struct Coverages {
    pub sets: Vec<Coverage>,
}

impl Coverages {
    /// The coverage of the rules at `path` (built as `payload`), made the
    /// first time they are asked for: the rule files read again for their
    /// lines, a note when they cannot be (a bundle).
    pub fn of(
        &mut self,
        path: &Path,
        payload: &Arc<Payload>,
        console: &mut Console<'_>,
    ) -> io::Result<&mut Coverage> {
        let found = self.sets.iter().position(|set| set.path == path);
        let index = match found {
            Some(index) => index,
            None => {
                let lines = match sources::read(path, payload) {
                    Ok(lines) => Some(lines),
                    Err(why) => {
                        writeln!(
                            console.err,
                            "note: {}: {why}; its rules are in the coverage report, not in the lcov file",
                            path.display()
                        )?;
                        None
                    }
                };
                self.sets
                    .push(Coverage::new(path, Arc::clone(payload), lines));
                self.sets.len() - 1
            }
        };
        Ok(&mut self.sets[index])
    }
}
