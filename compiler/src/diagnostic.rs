//! Rule-file diagnostics (docs/rules.md#errors-and-warnings): a plain, typed value that names
//! the file, the rule and the step, points at a byte span with a label, and
//! may carry a help line and related labels (possibly in another file).
//!
//! Rendering: [`render_text`] through miette (fancy on a terminal, plain ASCII
//! otherwise, so that snapshots are stable across machines), and
//! [`to_json`] for `--format json`.

mod code;

pub use code::Code;

use crate::load::SourceFile;
use crate::span::line_col;
use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents,
    SourceCode, SourceSpan, SpanContents,
};
use serde_json::{json, Value};
use std::fmt;
use std::ops::Range;

/// How bad a diagnostic is. Warnings never reject anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// A span in the diagnostic's own file with the text shown under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub span: Range<usize>,
    pub text: String,
}

/// A secondary label, in the same file or in another one (for example the
/// first definition of a duplicated rule name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    /// File name relative to the rules directory.
    pub file: String,
    pub span: Range<usize>,
    pub text: String,
}

/// One problem found in the rules directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable code, e.g. `rulec::duration`; listed in docs/diagnostics.md.
    pub code: Code,
    pub severity: Severity,
    /// One line: what is wrong.
    pub message: String,
    /// File name relative to the rules directory; `None` for a problem with
    /// the directory itself.
    pub file: Option<String>,
    /// The rule's name, when it has a usable one.
    pub rule: Option<String>,
    /// 0-based index of the step the problem is in.
    pub step: Option<usize>,
    /// The primary span in `file` and what is wrong there.
    pub label: Option<Label>,
    /// How to fix it, where that is known.
    pub help: Option<String>,
    pub related: Vec<Related>,
}

/// `text` with its control characters escaped (`\n`, `\u{0}`), so that a
/// rule name cannot break a report line; other text is left as written.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl Diagnostic {
    pub fn new(severity: Severity, code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            severity,
            message: message.into(),
            file: None,
            rule: None,
            step: None,
            label: None,
            help: None,
            related: Vec::new(),
        }
    }

    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, message)
    }

    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, message)
    }

    pub fn at(mut self, span: Range<usize>, label: impl Into<String>) -> Self {
        self.label = Some(Label {
            span,
            text: label.into(),
        });
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn in_file(mut self, file: &str) -> Self {
        self.file = Some(file.to_string());
        self
    }

    pub fn with_related(mut self, file: &str, span: Range<usize>, text: impl Into<String>) -> Self {
        self.related.push(Related {
            file: file.to_string(),
            span,
            text: text.into(),
        });
        self
    }

    /// The message with its context, as shown in text output:
    /// ``rule `x`, step 0: message``.
    fn headline(&self) -> String {
        match (&self.rule, self.step) {
            (Some(rule), Some(step)) => format!(
                "rule `{}`, step {step}: {}",
                escape_controls(rule),
                self.message
            ),
            (Some(rule), None) => format!("rule `{}`: {}", escape_controls(rule), self.message),
            (None, Some(step)) => format!("step {step}: {}", self.message),
            (None, None) => self.message.clone(),
        }
    }
}

/// Text output style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStyle {
    /// Colours and Unicode box drawing, for a terminal.
    Fancy,
    /// No colour, ASCII art only, fixed width: stable in logs and snapshots.
    Plain,
}

/// Renders diagnostics for people, each followed by a blank line.
pub fn render_text(diagnostics: &[Diagnostic], files: &[SourceFile], style: TextStyle) -> String {
    let handler = match style {
        TextStyle::Fancy => GraphicalReportHandler::new_themed(GraphicalTheme::unicode()),
        // No wrapping: long help lines stay whole (miette would otherwise
        // split `cancel-on` at its hyphen), and logs do not depend on width.
        TextStyle::Plain => GraphicalReportHandler::new_themed(GraphicalTheme::none())
            .with_links(false)
            .with_wrap_lines(false),
    }
    .with_width(100);
    let mut out = String::new();
    for diagnostic in diagnostics {
        let report = Report::new(diagnostic, files);
        if handler.render_report(&mut out, &report).is_err() {
            // Rendering into a String only fails if a Display impl fails;
            // fall back to the one-line form rather than lose the problem.
            out.push_str(&format!("{}: {}\n", diagnostic.code, diagnostic.headline()));
        }
        out.push('\n');
    }
    out
}

/// One JSON object for `--format json`. Offsets are bytes; `line` and
/// `column` are 1-based, columns counted in characters, as in the text
/// header `[file:line:column]` (the private `Source` counts them the same way).
pub fn to_json(diagnostic: &Diagnostic, files: &[SourceFile]) -> Value {
    let position = |file: Option<&str>, span: &Range<usize>| {
        let text = file.and_then(|name| find(files, name)).unwrap_or("");
        let (line, column) = line_col(text, span.start);
        (
            json!({ "offset": span.start, "length": span.end.saturating_sub(span.start) }),
            line,
            column,
        )
    };
    let (span, line, column) = match &diagnostic.label {
        Some(label) => {
            let (span, line, column) = position(diagnostic.file.as_deref(), &label.span);
            (span, json!(line), json!(column))
        }
        None => (Value::Null, Value::Null, Value::Null),
    };
    let related: Vec<Value> = diagnostic
        .related
        .iter()
        .map(|related| {
            let (span, line, column) = position(Some(&related.file), &related.span);
            json!({
                "file": related.file,
                "label": related.text,
                "span": span,
                "line": line,
                "column": column,
            })
        })
        .collect();
    json!({
        "file": diagnostic.file,
        "rule": diagnostic.rule,
        "step": diagnostic.step,
        "severity": diagnostic.severity.as_str(),
        "code": diagnostic.code.as_str(),
        "message": diagnostic.message,
        "label": diagnostic.label.as_ref().map(|label| &label.text),
        "help": diagnostic.help,
        "span": span,
        "line": line,
        "column": column,
        "related": related,
    })
}

fn find<'a>(files: &'a [SourceFile], name: &str) -> Option<&'a str> {
    files
        .iter()
        .find(|file| file.name == name)
        .map(|file| file.text.as_str())
}

/// Adapter that lets miette render a [`Diagnostic`]: the primary label and
/// related labels in the same file become labels; related labels in other
/// files become related reports with their own source.
struct Report {
    headline: String,
    code: Code,
    severity: miette::Severity,
    help: Option<String>,
    source: Option<Source>,
    labels: Vec<LabeledSpan>,
    related: Vec<Report>,
}

impl Report {
    fn new(diagnostic: &Diagnostic, files: &[SourceFile]) -> Self {
        let source = diagnostic
            .file
            .as_deref()
            .and_then(|name| find(files, name).map(|text| Source::new(name, text)));
        let mut labels = Vec::new();
        let mut related = Vec::new();
        if source.is_some() {
            if let Some(label) = &diagnostic.label {
                labels.push(LabeledSpan::new_primary_with_span(
                    Some(label.text.clone()),
                    to_source_span(&label.span),
                ));
            }
        }
        for other in &diagnostic.related {
            if source.is_some() && diagnostic.file.as_deref() == Some(other.file.as_str()) {
                labels.push(LabeledSpan::new_with_span(
                    Some(other.text.clone()),
                    to_source_span(&other.span),
                ));
            } else {
                related.push(Report {
                    headline: format!("{} ({})", other.text, other.file),
                    code: diagnostic.code,
                    severity: miette::Severity::Advice,
                    help: None,
                    source: find(files, &other.file).map(|text| Source::new(&other.file, text)),
                    labels: vec![LabeledSpan::new_primary_with_span(
                        Some(other.text.clone()),
                        to_source_span(&other.span),
                    )],
                    related: Vec::new(),
                });
            }
        }
        let mut headline = diagnostic.headline();
        if source.is_none() {
            // No snippet to show (and so no `[file:line:col]` header): name
            // the file in the headline instead.
            if let Some(file) = &diagnostic.file {
                headline = format!("{file}: {headline}");
            }
        }
        Self {
            headline,
            code: diagnostic.code,
            severity: match diagnostic.severity {
                Severity::Error => miette::Severity::Error,
                Severity::Warning => miette::Severity::Warning,
            },
            help: diagnostic.help.clone(),
            source,
            labels,
            related,
        }
    }
}

/// A rule file as miette's source. miette counts the column of its
/// `[file:line:column]` header in bytes; this counts characters instead, so
/// the text header and the JSON `column` agree on lines with non-ASCII text.
struct Source {
    name: String,
    text: String,
}

impl Source {
    fn new(name: &str, text: &str) -> Self {
        Self {
            name: name.to_string(),
            text: text.to_string(),
        }
    }
}

impl SourceCode for Source {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let inner = self
            .text
            .read_span(span, context_lines_before, context_lines_after)?;
        // miette reports a column only without context lines before; then
        // it is the byte count from the line start to the span.
        let column = match inner.column() {
            0 => 0,
            bytes => {
                let start = span.offset().min(self.text.len());
                let line_start = start.saturating_sub(bytes);
                self.text
                    .get(line_start..start)
                    .map_or(bytes, |before| before.chars().count())
            }
        };
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            *inner.span(),
            inner.line(),
            column,
            inner.line_count(),
        )))
    }
}

fn to_source_span(span: &Range<usize>) -> SourceSpan {
    SourceSpan::from((span.start, span.end.saturating_sub(span.start)))
}

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Report")
            .field("code", &self.code)
            .field("headline", &self.headline)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline)
    }
}

impl std::error::Error for Report {}

impl miette::Diagnostic for Report {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(self.severity)
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|help| Box::new(help) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_ref().map(|source| source as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().cloned()))
        }
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        if self.related.is_empty() {
            None
        } else {
            Some(Box::new(
                self.related
                    .iter()
                    .map(|report| report as &dyn miette::Diagnostic),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<SourceFile> {
        vec![
            SourceFile {
                name: "a.toml".into(),
                text: "[[rule]]\nname = \"x\"\n".into(),
            },
            SourceFile {
                name: "b.toml".into(),
                text: "[[rule]]\nname = \"x\"\n".into(),
            },
        ]
    }

    fn duplicate() -> Diagnostic {
        let mut diagnostic = Diagnostic::error(Code::DuplicateName, "taken")
            .in_file("b.toml")
            .at(16..19, "second")
            .with_related("a.toml", 16..19, "first")
            .with_help("rename");
        diagnostic.rule = Some("x".into());
        diagnostic
    }

    #[test]
    fn plain_text_names_both_files_without_escape_codes() {
        let text = render_text(&[duplicate()], &files(), TextStyle::Plain);
        assert!(text.contains("rule `x`: taken"), "{text}");
        let mut diagnostic = Diagnostic::error(Code::NameCharacters, "odd");
        diagnostic.rule = Some("a\nb\u{0}ä".into());
        assert_eq!(diagnostic.headline(), "rule `a\\nb\\u{0}ä`: odd");
        assert!(text.contains("[b.toml:2:8]"), "{text}");
        assert!(text.contains("[a.toml:2:8]"), "{text}");
        assert!(text.contains("help: rename"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.is_ascii(), "{text}");
    }

    #[test]
    fn fancy_text_has_colour() {
        let text = render_text(&[duplicate()], &files(), TextStyle::Fancy);
        assert!(text.contains('\u{1b}'));
        assert!(text.contains("rulec::duplicate-name"));
    }

    #[test]
    fn json_has_positions_and_related() {
        let value = to_json(&duplicate(), &files());
        assert_eq!(value["line"], 2);
        assert_eq!(value["column"], 8);
        assert_eq!(value["span"]["offset"], 16);
        assert_eq!(value["span"]["length"], 3);
        assert_eq!(value["step"], Value::Null);
        assert_eq!(value["related"][0]["file"], "a.toml");
        assert_eq!(value["related"][0]["line"], 2);
    }

    #[test]
    fn text_and_json_columns_agree_after_non_ascii_text() {
        let files = vec![SourceFile {
            name: "u.toml".into(),
            text: "[[rule]]\nname = \"été\" # x\n".into(),
        }];
        let at = files[0].text.find('#').unwrap();
        let diagnostic = Diagnostic::error(Code::Toml, "here")
            .in_file("u.toml")
            .at(at..at + 1, "this");
        // `name = "été" ` is 13 characters (15 bytes): column 14.
        assert_eq!(to_json(&diagnostic, &files)["column"], 14);
        let text = render_text(&[diagnostic], &files, TextStyle::Plain);
        assert!(text.contains("[u.toml:2:14]"), "{text}");
    }

    #[test]
    fn a_diagnostic_without_span_still_renders() {
        let diagnostic = Diagnostic::error(Code::Encoding, "not UTF-8").in_file("c.toml");
        let text = render_text(
            std::slice::from_ref(&diagnostic),
            &files(),
            TextStyle::Plain,
        );
        assert!(text.contains("x c.toml: not UTF-8"), "{text}");
        let value = to_json(&diagnostic, &files());
        assert_eq!(value["span"], Value::Null);
        assert_eq!(value["file"], "c.toml");
    }
}
