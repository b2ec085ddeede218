//! `rulec check`'s diagnostics as the protocol publishes them, and the
//! quick fixes they carry (docs/editors.md#quick-fixes): a diagnostic with
//! a [`crate::diagnostic::Fix`] keeps it in its `data`, and a code action
//! request near it answers with that edit.

use super::text;
use crate::diagnostic::{Diagnostic, Severity};
use crate::span::Lines;
use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, DiagnosticRelatedInformation,
    DiagnosticSeverity, Location, NumberOrString, Range as LspRange, TextEdit, Url, WorkspaceEdit,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A problem in one file, in bytes, before it is placed in protocol
/// positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub span: Range<usize>,
    pub severity: Severity,
    pub code: &'static str,
    pub message: String,
    pub help: Option<String>,
    /// Write `.1` over `.0` (bytes of the same file).
    pub fix: Option<(Range<usize>, String)>,
    /// Other places it concerns: a file, a span in it, and what is there.
    pub related: Vec<(PathBuf, Range<usize>, String)>,
}

impl Problem {
    /// A rule-file diagnostic; its related places are files of `dir`.
    pub fn of(diagnostic: &Diagnostic, dir: &Path) -> Self {
        Problem {
            span: diagnostic
                .label
                .as_ref()
                .map_or(0..0, |label| label.span.clone()),
            severity: diagnostic.severity,
            code: diagnostic.code.as_str(),
            message: match &diagnostic.label {
                // The label says what is wrong at the place: editors show
                // no snippet, so it joins the headline.
                Some(label) if !label.text.is_empty() => {
                    format!("{} ({})", diagnostic.headline(), label.text)
                }
                _ => diagnostic.headline(),
            },
            help: diagnostic.help.clone(),
            fix: diagnostic
                .fix
                .as_ref()
                .map(|fix| (fix.span.clone(), fix.replacement.clone())),
            related: diagnostic
                .related
                .iter()
                .map(|related| {
                    (
                        dir.join(&related.file),
                        related.span.clone(),
                        related.text.clone(),
                    )
                })
                .collect(),
        }
    }
}

/// The protocol's diagnostic for `problem` in the file indexed by `lines`;
/// `texts` gives the text of the files its related places are in.
pub fn to_lsp(
    problem: &Problem,
    lines: &Lines<'_>,
    texts: &HashMap<&Path, &str>,
) -> lsp_types::Diagnostic {
    let related: Vec<DiagnosticRelatedInformation> = problem
        .related
        .iter()
        .filter_map(|(path, span, message)| {
            let uri = Url::from_file_path(path).ok()?;
            let range = texts
                .get(path.as_path())
                .map(|text| text::range(&Lines::new(text), span))
                .unwrap_or_default();
            Some(DiagnosticRelatedInformation {
                location: Location { uri, range },
                message: message.clone(),
            })
        })
        .collect();
    let message = match &problem.help {
        Some(help) => format!("{}\nhelp: {help}", problem.message),
        None => problem.message.clone(),
    };
    lsp_types::Diagnostic {
        range: text::range(lines, &problem.span),
        severity: Some(match problem.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(problem.code.to_string())),
        source: Some("rulec".to_string()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        data: problem.fix.as_ref().map(|(span, replacement)| {
            json!({ "fix": { "range": text::range(lines, span), "newText": replacement } })
        }),
        ..lsp_types::Diagnostic::default()
    }
}

/// The quick fixes of the diagnostics (as published for `uri`) that touch
/// `range`.
pub fn quick_fixes(
    uri: &Url,
    published: &[lsp_types::Diagnostic],
    range: LspRange,
) -> Vec<CodeActionOrCommand> {
    published
        .iter()
        .filter(|diagnostic| touches(diagnostic.range, range))
        .filter_map(|diagnostic| {
            let fix = diagnostic.data.as_ref()?.get("fix")?;
            let edit: TextEdit = serde_json::from_value(Value::clone(fix)).ok()?;
            let title = format!("Change to {}", edit.new_text);
            let changes = HashMap::from([(uri.clone(), vec![edit])]);
            Some(CodeActionOrCommand::CodeAction(CodeAction {
                title,
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![diagnostic.clone()]),
                edit: Some(WorkspaceEdit {
                    changes: Some(changes),
                    ..WorkspaceEdit::default()
                }),
                is_preferred: Some(true),
                ..CodeAction::default()
            }))
        })
        .collect()
}

/// Whether two ranges share a position (ends included: a cursor touches
/// the diagnostic it stands at the end of).
fn touches(a: LspRange, b: LspRange) -> bool {
    a.start <= b.end && b.start <= a.end
}
