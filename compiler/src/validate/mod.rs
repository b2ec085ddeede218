//! Validation of rule tables (docs/rules.md): every key of
//! every rule and step, the `when` expressions (through [`crate::when`]),
//! names across files, and disabled rules. The output is one
//! [`CheckedRule`] per rule that survived, in bundle order, plus the
//! diagnostics.
//!
//! An error rejects only its rule; file-level problems (syntax, unknown keys)
//! are found earlier by [`crate::rulefile`].
//!
//! Layout: this module holds the output types, the driver and the name
//! rules across files; `checker` the per-rule state and typed value
//! accessors; `rule`, `step` and `can` the checks of each level;
//! `template` the computed values (`${...}`) of a step.

mod can;
mod catalogue;
mod checker;
mod duration;
mod input;
mod per;
mod profile;
mod rule;
mod schedule;
mod step;
mod template;

pub use can::parse_can_data;
pub use catalogue::{CatalogueTopic, TopicOrigin};
pub(crate) use checker::{unknown_key, wrong_type};
pub use input::CheckedInput;

use crate::diagnostic::{Code, Diagnostic, Severity};
use crate::load::SourceFile;
use crate::profile::Catalogue;
use crate::rulefile;
use crate::span::StringMap;
use crate::when::CheckedWhen;
use checker::RuleChecker;
use rulecore::bundle::{Action, Concurrency, Repeat};
use rulecore::TopicPattern;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// A `when` expression, or one `${...}` of a computed value, that
/// type-checked, with its source text.
#[derive(Debug, Clone)]
pub struct CheckedExpr {
    /// The decoded string value, as written (TOML quoting removed): the
    /// whole expression for a `when`, the whole value for a `${...}`.
    pub source: String,
    /// What the `when` checker made of it.
    pub checked: CheckedWhen,
    /// The string value in the rule file, quotes included.
    pub span: Range<usize>,
    /// The expression's bytes in `source` (all of it for a `when`).
    pub part: Range<usize>,
}

impl CheckedExpr {
    /// The expression's text.
    pub fn text(&self) -> &str {
        self.source.get(self.part.clone()).unwrap_or_default()
    }

    /// Maps offsets into [`Self::text`] to the rule file `file_text`.
    pub fn map(&self, file_text: &str) -> StringMap {
        StringMap::new(file_text, self.span.clone(), &self.source).sub(self.part.clone())
    }
}

/// A computed value's pieces, in order; `build` lowers each expression.
#[derive(Debug, Clone)]
pub struct CheckedTemplate {
    pub parts: Vec<CheckedPart>,
}

/// One piece of a [`CheckedTemplate`].
#[derive(Debug, Clone)]
pub enum CheckedPart {
    Literal(String),
    Expr(CheckedExpr),
}

/// One step that passed every check; `build` turns it into a
/// `rulecore::bundle::Step` (lowering `when`, computing the fingerprint).
#[derive(Debug, Clone)]
pub struct CheckedStep {
    /// The action with every argument resolved (exec timeout defaulted, CAN
    /// frame parsed).
    pub action: Action,
    pub when: Option<CheckedExpr>,
    /// `after` in nanoseconds, >= 0.
    pub after_ns: u64,
    /// Explicit `durable`, or `after_ns > 0` by default.
    pub durable: bool,
    /// The `[[rule.step]]` header (or inline table) in the rule file.
    pub span: Range<usize>,
    /// One per computed value of `action`, in the order of
    /// [`Action::texts`]' computed ones.
    pub values: Vec<CheckedTemplate>,
}

impl CheckedStep {
    /// Every expression of the step: its `when`, then those of its values.
    pub fn exprs(&self) -> impl Iterator<Item = &CheckedExpr> {
        self.when.iter().chain(self.values.iter().flat_map(|value| {
            value.parts.iter().filter_map(|part| match part {
                CheckedPart::Expr(expr) => Some(expr),
                CheckedPart::Literal(_) => None,
            })
        }))
    }
}

/// One rule that passed every check, ready for `build` to turn into a
/// `rulecore::bundle::Rule`.
#[derive(Debug, Clone)]
pub struct CheckedRule {
    pub name: String,
    /// The rule file's name relative to the rules directory.
    pub source: String,
    /// `false`: compiled as replay-only (docs/rules.md#disabled-rules).
    pub enabled: bool,
    /// `protected = true` (docs/operating.md#trust).
    pub protected: bool,
    /// `trip` (docs/safety.md#the-breaker).
    pub trip: rulecore::envelope::Breaker,
    pub on: Vec<TopicPattern>,
    pub cancel_on: Vec<TopicPattern>,
    /// Where each `on` and `cancel-on` pattern is written, in order.
    pub on_spans: Vec<Range<usize>>,
    pub cancel_on_spans: Vec<Range<usize>>,
    pub concurrency: Concurrency,
    /// 0 means none.
    pub cooldown_ns: u64,
    /// 0 means none.
    pub debounce_ns: u64,
    /// `for` (docs/semantics.md#hold); 0 means none.
    pub hold_ns: u64,
    /// [`Repeat::ONCE`] when the rule has no `repeat`.
    pub repeat: Repeat,
    /// `per` (docs/rules.md#keyed-runs): the key's expression.
    pub per: Option<CheckedExpr>,
    /// `at` and `every` (docs/rules.md#schedules); empty when neither.
    pub schedule: rulecore::schedule::Schedule,
    pub when: Option<CheckedExpr>,
    pub steps: Vec<CheckedStep>,
    /// `[[rule.finally]]`, never durable (docs/rules.md#finally).
    pub finally: Vec<CheckedStep>,
    /// `[[rule.input]]`, in file order (docs/rules.md#inputs).
    pub inputs: Vec<CheckedInput>,
    /// The `[[rule]]` header in the rule file.
    pub span: Range<usize>,
}

impl CheckedRule {
    /// Every step's `when`, the steps' then the finally steps'
    /// (docs/rules.md#finally), each with its index and whether it is a
    /// finally step's.
    pub fn step_whens(&self) -> impl Iterator<Item = (usize, bool, &CheckedExpr)> {
        whens_of(&self.steps, false).chain(whens_of(&self.finally, true))
    }
}

/// The expressions of one list of steps (each `when`, then those of its
/// computed values), with their step's index and `finally`.
fn whens_of(
    steps: &[CheckedStep],
    finally: bool,
) -> impl Iterator<Item = (usize, bool, &CheckedExpr)> {
    steps
        .iter()
        .enumerate()
        .flat_map(move |(index, step)| step.exprs().map(move |expr| (index, finally, expr)))
}

/// The outcome of validating a rules directory.
#[derive(Debug, Clone, Default)]
pub struct Validated {
    /// Rules that survived, in bundle order (file name order, then position
    /// in the file).
    pub rules: Vec<CheckedRule>,
    /// Every problem, in file order, then position in the file.
    pub diagnostics: Vec<Diagnostic>,
    /// Rule tables read from files that parsed (whether or not they passed).
    pub rules_read: usize,
    /// [`Self::rules_read`] of each file, in file order.
    pub rules_read_by_file: Vec<usize>,
    /// Warnings made errors by `deny_warnings`.
    pub denied_warnings: usize,
    /// The topic catalogue the rules were held against, in the order it is
    /// searched (the directory's `[[topic]]`, the inputs', the profile's);
    /// empty when there is none.
    pub topics: Vec<CatalogueTopic>,
    /// The `[[guard]]` and `[[limit]]` tables of the files that were not
    /// rejected, in file order (docs/safety.md).
    pub envelope: crate::envelope::EnvelopeDecls,
    /// Files whose guards or limits did not all make it into
    /// [`Self::envelope`] (an error in a `[[guard]]` or `[[limit]]` table,
    /// or a rejected file that declares one): `rulec build --partial`
    /// refuses to write a bundle without them (docs/safety.md#adding-to-it).
    pub envelope_broken: Vec<String>,
}

/// The note a warning made an error by `--deny-warnings` carries.
pub(crate) const DENIED_NOTE: &str = "a warning, made an error by --deny-warnings";

/// Makes every warning of `diagnostics` an error (`--deny-warnings`),
/// saying so in its help; returns how many it changed.
pub(crate) fn deny(diagnostics: &mut [Diagnostic]) -> usize {
    let mut denied = 0;
    for diagnostic in diagnostics {
        if diagnostic.severity == Severity::Warning {
            diagnostic.severity = Severity::Error;
            denied += 1;
            let note = DENIED_NOTE;
            diagnostic.help = Some(match diagnostic.help.take() {
                Some(help) => format!("{help}\n{note}"),
                None => note.to_string(),
            });
        }
    }
    denied
}

/// Whether `diagnostic` is a warning `--deny-warnings` made an error.
pub(crate) fn is_denied(diagnostic: &Diagnostic) -> bool {
    diagnostic
        .help
        .as_deref()
        .is_some_and(|help| help.ends_with(DENIED_NOTE))
}

/// What checking one file finds on its own: its rules' own checks, its
/// topic declarations, what rejects it. The checks across files run on
/// these every time; a file's own are reused while its text is the same.
#[derive(Debug, Clone)]
struct FileCheck {
    /// The file's text, which the check is of.
    text: String,
    diagnostics: Vec<Diagnostic>,
    /// A syntax error or an unknown key: nothing of it is compiled or
    /// declared.
    rejected: bool,
    topics: Vec<catalogue::Topic>,
    /// Its guards and limits.
    envelope: crate::envelope::EnvelopeDecls,
    /// An error left one of its guards or limits out.
    envelope_broken: bool,
    rules_read: usize,
    /// Rules that passed their own checks, with the span of their name.
    candidates: Vec<(CheckedRule, Range<usize>)>,
    /// What the catalogue checks read of every other rule.
    others: Vec<catalogue::RuleUses>,
}

/// The checks of single files kept between runs over the same directory
/// (`rulec lsp` checks it at every keystroke, docs/editors.md#how-fast):
/// each is reused while its file's text, `deny_warnings` and the
/// catalogue are the same. One cache serves one catalogue; it is cleared
/// when `deny_warnings` changes.
#[derive(Debug, Clone, Default)]
pub struct FileChecks {
    deny_warnings: bool,
    files: HashMap<String, Arc<FileCheck>>,
}

impl FileChecks {
    fn get(
        &mut self,
        file: &SourceFile,
        deny_warnings: bool,
        catalogue: Option<&Catalogue>,
    ) -> Arc<FileCheck> {
        if self.deny_warnings != deny_warnings {
            self.files.clear();
            self.deny_warnings = deny_warnings;
        }
        match self.files.get(&file.name) {
            Some(check) if check.text == file.text => Arc::clone(check),
            _ => {
                let check = Arc::new(check_file(file, deny_warnings, catalogue));
                self.files.insert(file.name.clone(), Arc::clone(&check));
                check
            }
        }
    }
}

/// One file's own checks.
fn check_file(file: &SourceFile, deny_warnings: bool, catalogue: Option<&Catalogue>) -> FileCheck {
    let mut found = Validated::default();
    let mut candidates = Vec::new();
    let mut others = Vec::new();
    // A rejected file's rules and topics are still checked, for their
    // problems, but none of them is compiled or declared.
    let (parsed, rejecting) = rulefile::parse_all(file);
    let rejected = !rejecting.is_empty();
    found.diagnostics.extend(rejecting);
    let topics = catalogue::declarations(file, &parsed.topics, &mut found);
    let mut envelope = crate::envelope::EnvelopeDecls::default();
    let mut envelope_diagnostics = Vec::new();
    for (items, is_guard) in [(&parsed.guards, true), (&parsed.limits, false)] {
        crate::envelope::read_tables(
            file,
            items,
            is_guard,
            false,
            &mut envelope,
            &mut envelope_diagnostics,
        );
    }
    let envelope_broken = envelope_diagnostics
        .iter()
        .any(|d| d.severity == Severity::Error)
        || (rejected && crate::envelope::declares_any(&file.text));
    found.diagnostics.append(&mut envelope_diagnostics);
    for raw in &parsed.rules {
        let mut checker = RuleChecker::new(file, raw, catalogue);
        let checked = checker.check();
        // A problem of a table as a whole where a key was read under a
        // guess rests on the guess (docs/rules.md#errors-and-warnings).
        checker.diagnostics.retain(|d| {
            d.label
                .as_ref()
                .is_none_or(|label| !raw.guessed.contains(&label.span))
        });
        let has_errors = checker
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error || deny_warnings);
        if has_errors && !checker.enabled {
            // docs/rules.md#disabled-rules: a disabled rule's problems do not fail the
            // check; the rule is left out of the bundle instead.
            for diagnostic in &mut checker.diagnostics {
                if diagnostic.severity == Severity::Error {
                    diagnostic.severity = Severity::Warning;
                    let note = "this rule is disabled (`enabled = false`), so this is a warning and the rule is left out of the bundle";
                    diagnostic.help = Some(match diagnostic.help.take() {
                        Some(help) => format!("{help}\n{note}"),
                        None => note.to_string(),
                    });
                }
            }
        }
        found.diagnostics.append(&mut checker.diagnostics);
        match (checked, has_errors || rejected) {
            (Some(rule), false) => {
                let name_span = checker.name_span.clone().unwrap_or(raw.span.clone());
                candidates.push((rule, name_span));
            }
            (Some(rule), true) => others.push(catalogue::RuleUses::of_rule(&rule)),
            (None, _) => others.push(std::mem::take(&mut checker.uses)),
        }
    }
    FileCheck {
        text: file.text.clone(),
        diagnostics: found.diagnostics,
        rejected,
        topics,
        envelope,
        envelope_broken,
        rules_read: parsed.rules.len(),
        candidates,
        others,
    }
}

/// Validates every file, in order, reusing the checks of files `cache`
/// holds; the one way in is [`crate::session::Session`].
///
/// `deny_warnings` (`--deny-warnings`, docs/rules.md#errors-and-warnings)
/// turns every warning into an error: a rule with one is rejected like a
/// rule with any other error, and warnings tied to no surviving rule are
/// errors too. A `catalogue` (a bus profile's) holds the rules against the
/// bus too (docs/rules.md#checks-against-the-profile): its derived topics
/// join the topic catalogue (a directory's `[[topic]]` of the same name
/// wins), and `to`/`from`, `state()` and redis `push` values are checked
/// against the values it declares. `None` checks exactly as without a
/// profile.
pub(crate) fn validate_cached(
    files: &[SourceFile],
    deny_warnings: bool,
    catalogue: Option<&Catalogue>,
    cache: &mut FileChecks,
) -> Validated {
    let mut out = Validated::default();
    // Rules that passed their own checks, before names are settled.
    let mut candidates: Vec<(CheckedRule, Range<usize>)> = Vec::new();
    let mut topics = Vec::new();
    let mut others = Vec::new();
    for file in files {
        let check = cache.get(file, deny_warnings, catalogue);
        others.push(Arc::clone(&check));
        out.diagnostics.extend(check.diagnostics.iter().cloned());
        if check.envelope_broken {
            out.envelope_broken.push(file.name.clone());
        }
        let rules_read = if check.rejected {
            0
        } else {
            topics.extend(check.topics.iter().cloned());
            out.envelope.extend(check.envelope.clone());
            check.rules_read
        };
        out.rules_read += rules_read;
        out.rules_read_by_file.push(rules_read);
        candidates.extend(check.candidates.iter().cloned());
    }
    // Files gone from the directory are forgotten.
    let names: std::collections::HashSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
    cache.files.retain(|name, _| names.contains(name.as_str()));
    let across = input::check_across_rules(&mut candidates);
    out.diagnostics.extend(across);
    catalogue::check_rules(
        &topics,
        catalogue,
        files,
        deny_warnings,
        &mut candidates,
        others.iter().flat_map(|check| &check.others),
        &mut out,
    );
    settle_names(candidates, &mut out);
    out.diagnostics
        .extend(crate::safety::check(&out.rules, catalogue));
    if deny_warnings {
        out.denied_warnings += deny(&mut out.diagnostics);
    }
    // Files are already in order; within a file, order by position. The sort
    // is stable, so diagnostics at one position keep their finding order.
    let file_order: HashMap<&str, usize> = files
        .iter()
        .enumerate()
        .map(|(i, file)| (file.name.as_str(), i))
        .collect();
    out.diagnostics.sort_by_key(|d| {
        (
            d.file
                .as_deref()
                .and_then(|name| file_order.get(name).copied()),
            d.label.as_ref().map_or(0, |label| label.span.start),
        )
    });
    // One problem is reported once, however many checks came upon it.
    out.diagnostics.dedup_by(|a, b| {
        a.file == b.file
            && a.code == b.code
            && a.message == b.message
            && a.label.as_ref().map(|l| &l.span) == b.label.as_ref().map(|l| &l.span)
    });
    out
}

/// docs/rules.md#errors-and-warnings, docs/rules.md#disabled-rules: among enabled rules that compiled, the first
/// definition of a name keeps it and later ones are errors; a disabled rule
/// whose name is taken (by an enabled rule, or an earlier disabled one) is
/// left out with a warning, since a pending record could not tell which rule
/// it belongs to.
fn settle_names(candidates: Vec<(CheckedRule, Range<usize>)>, out: &mut Validated) {
    let mut enabled_names: HashMap<String, (String, Range<usize>)> = HashMap::new();
    let mut rejected = vec![false; candidates.len()];
    for (i, (rule, name_span)) in candidates.iter().enumerate() {
        if !rule.enabled {
            continue;
        }
        if let Some((first_file, first_span)) = enabled_names.get(&rule.name) {
            let where_first = if *first_file == rule.source {
                "earlier in this file".to_string()
            } else {
                format!("in {first_file}")
            };
            out.diagnostics.push(
                Diagnostic::error(
                    Code::DuplicateName,
                    format!(
                        "the rule name `{}` is already used {where_first}",
                        rule.name
                    ),
                )
                .in_file(&rule.source)
                .at(name_span.clone(), "second definition of this name")
                .with_related(first_file, first_span.clone(), "first defined here")
                .with_help("rule names must be unique across all rule files; rename one of them")
                .named(&rule.name),
            );
            rejected[i] = true;
        } else {
            enabled_names.insert(rule.name.clone(), (rule.source.clone(), name_span.clone()));
        }
    }
    let mut disabled_names: HashMap<String, (String, Range<usize>)> = HashMap::new();
    for (i, (rule, name_span)) in candidates.iter().enumerate() {
        if rule.enabled {
            continue;
        }
        let taken = enabled_names
            .get(&rule.name)
            .map(|first| (first, "an enabled rule"))
            .or_else(|| {
                disabled_names
                    .get(&rule.name)
                    .map(|first| (first, "another disabled rule"))
            });
        if let Some(((first_file, first_span), by)) = taken {
            out.diagnostics.push(
                Diagnostic::warning(
                    Code::DisabledDuplicateName,
                    format!(
                        "disabled rule left out: {by} is also named `{}`",
                        rule.name
                    ),
                )
                .in_file(&rule.source)
                .at(name_span.clone(), "this disabled rule is left out of the bundle")
                .with_related(first_file, first_span.clone(), "the name is used here")
                .with_help("a pending record could not tell which of the two rules it belongs to; rename one of them")
                .named(&rule.name),
            );
            rejected[i] = true;
        } else {
            disabled_names.insert(rule.name.clone(), (rule.source.clone(), name_span.clone()));
        }
    }
    out.rules = candidates
        .into_iter()
        .zip(rejected)
        .filter(|(_, rejected)| !rejected)
        .map(|((rule, _), _)| rule)
        .collect();
}

impl Diagnostic {
    pub(super) fn named(mut self, rule: &str) -> Self {
        self.rule = Some(rule.to_string());
        self
    }
}
