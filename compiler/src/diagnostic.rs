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
use crate::span::Lines;
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

/// The edit a "did you mean" stands for: replace `span` of the
/// diagnostic's file with `replacement` (TOML text, quotes included when
/// the span includes them). Editors offer it as a quick fix
/// (docs/editors.md#quick-fixes); the text and JSON output do not show it,
/// the help line says it in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fix {
    pub span: Range<usize>,
    pub replacement: String,
}

/// `text` as a TOML string value, quotes included: the replacement of a
/// fix that rewrites a whole string value.
pub fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
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
    /// `step` counts the rule's `[[rule.finally]]` steps (docs/rules.md#finally).
    pub finally: bool,
    /// The primary span in `file` and what is wrong there.
    pub label: Option<Label>,
    /// How to fix it, where that is known.
    pub help: Option<String>,
    pub related: Vec<Related>,
    /// The fix the help suggests, where it is one edit.
    pub fix: Option<Fix>,
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
            finally: false,
            label: None,
            help: None,
            related: Vec::new(),
            fix: None,
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

    /// The one edit that fixes it: `replacement` for `span`.
    pub fn with_fix(mut self, span: Range<usize>, replacement: impl Into<String>) -> Self {
        self.fix = Some(Fix {
            span,
            replacement: replacement.into(),
        });
        self
    }

    /// [`Diagnostic::with_fix`] when there is one.
    pub fn with_fix_opt(self, fix: Option<(Range<usize>, String)>) -> Self {
        match fix {
            Some((span, replacement)) => self.with_fix(span, replacement),
            None => self,
        }
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
    pub fn headline(&self) -> String {
        let list = if self.finally { "finally step" } else { "step" };
        match (&self.rule, self.step) {
            (Some(rule), Some(step)) => format!(
                "rule `{}`, {list} {step}: {}",
                escape_controls(rule),
                self.message
            ),
            (Some(rule), None) => format!("rule `{}`: {}", escape_controls(rule), self.message),
            (None, Some(step)) => format!("{list} {step}: {}", self.message),
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

/// The longest line (in bytes) shown as a snippet under a diagnostic.
/// miette formats a label's column as a padding width, which the standard
/// library caps at 65535 (a panic past it), and a line of thousands of
/// characters helps nobody: a label on a longer line is reported by
/// position instead (docs/diagnostics.md#output).
pub const MAX_SNIPPET_LINE: usize = 4096;

/// The rule files diagnostics point into, by name, each with its line
/// index: built once per report, so that placing a diagnostic costs a
/// lookup, not a scan of its file.
#[derive(Debug)]
pub struct Sources<'a> {
    files: std::collections::HashMap<&'a str, Lines<'a>>,
}

impl<'a> Sources<'a> {
    pub fn new(files: &'a [SourceFile]) -> Self {
        Self {
            files: files
                .iter()
                .map(|file| (file.name.as_str(), Lines::new(&file.text)))
                .collect(),
        }
    }

    fn get(&self, name: &str) -> Option<&Lines<'a>> {
        self.files.get(name)
    }

    /// 1-based line and column of `offset` in file `name` (1, 1 when the
    /// file is unknown).
    fn line_col(&self, name: Option<&str>, offset: usize) -> (usize, usize) {
        name.and_then(|name| self.get(name))
            .map_or((1, 1), |lines| lines.line_col(offset))
    }
}

/// Renders diagnostics for people, each followed by a blank line.
pub fn render_text(diagnostics: &[Diagnostic], files: &[SourceFile], style: TextStyle) -> String {
    render_text_with(diagnostics, &Sources::new(files), style)
}

/// [`render_text`] against files already indexed.
pub fn render_text_with(
    diagnostics: &[Diagnostic],
    sources: &Sources<'_>,
    style: TextStyle,
) -> String {
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
        let report = Report::new(diagnostic, sources);
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
    to_json_with(diagnostic, &Sources::new(files))
}

/// [`to_json`] against files already indexed.
pub fn to_json_with(diagnostic: &Diagnostic, sources: &Sources<'_>) -> Value {
    let position = |file: Option<&str>, span: &Range<usize>| {
        let (line, column) = sources.line_col(file, span.start);
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
    let mut object = json!({
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
    });
    // Only a problem in a finally step says so: other lines read as before.
    if diagnostic.finally {
        object["finally"] = json!(true);
    }
    object
}

/// The file `name` as a snippet source for a label at `span`, unless a line
/// the label touches is too long to show ([`MAX_SNIPPET_LINE`]).
fn snippet<'s>(sources: &'s Sources<'_>, name: &str, span: &Range<usize>) -> Option<Source<'s>> {
    let lines = sources.get(name)?;
    let first = lines.line_of(span.start);
    let last = lines.line_of(span.end.max(span.start));
    let too_long = (first..=last.min(first + 1))
        .chain(std::iter::once(last))
        .any(|line| lines.line_range(line).len() > MAX_SNIPPET_LINE);
    (!too_long).then(|| Source {
        name: name.to_string(),
        lines,
    })
}

/// `a.toml:1:70034: ` for a label shown by position only.
fn position_prefix(sources: &Sources<'_>, name: &str, span: &Range<usize>) -> String {
    let (line, column) = sources.line_col(Some(name), span.start);
    format!("{name}:{line}:{column}: ")
}

/// Adapter that lets miette render a [`Diagnostic`]: the primary label and
/// related labels in the same file become labels; related labels in other
/// files become related reports with their own source.
struct Report<'s> {
    headline: String,
    code: Code,
    severity: miette::Severity,
    help: Option<String>,
    source: Option<Source<'s>>,
    labels: Vec<LabeledSpan>,
    related: Vec<Report<'s>>,
}

impl<'s> Report<'s> {
    fn new(diagnostic: &Diagnostic, sources: &'s Sources<'_>) -> Self {
        let file = diagnostic.file.as_deref();
        let spans = diagnostic.label.iter().map(|label| &label.span).chain(
            diagnostic
                .related
                .iter()
                .filter(|other| Some(other.file.as_str()) == file)
                .map(|other| &other.span),
        );
        let source = file.and_then(|name| {
            sources.get(name)?;
            let mut shown = None;
            for span in spans {
                shown = Some(snippet(sources, name, span)?);
            }
            shown.or_else(|| {
                sources.get(name).map(|lines| Source {
                    name: name.to_string(),
                    lines,
                })
            })
        });
        let mut headline = diagnostic.headline();
        if source.is_none() {
            // No snippet to show (and so no `[file:line:col]` header): name
            // the file, and the place when there is one, in the headline.
            if let Some(name) = file {
                let prefix = match &diagnostic.label {
                    Some(label) if sources.get(name).is_some() => {
                        headline = format!("{headline} ({})", label.text);
                        position_prefix(sources, name, &label.span)
                    }
                    _ => format!("{name}: "),
                };
                headline = format!("{prefix}{headline}");
            }
        }
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
            if source.is_some() && file == Some(other.file.as_str()) {
                labels.push(LabeledSpan::new_with_span(
                    Some(other.text.clone()),
                    to_source_span(&other.span),
                ));
            } else {
                related.push(Report::related(diagnostic.code, other, sources));
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

    /// A related label shown as a report of its own, with its own file.
    fn related(code: Code, other: &Related, sources: &'s Sources<'_>) -> Self {
        let source = snippet(sources, &other.file, &other.span);
        let headline = match (&source, sources.get(&other.file)) {
            (None, Some(_)) => format!(
                "{}{} ({})",
                position_prefix(sources, &other.file, &other.span),
                other.text,
                other.file
            ),
            _ => format!("{} ({})", other.text, other.file),
        };
        let labels = match source {
            Some(_) => vec![LabeledSpan::new_primary_with_span(
                Some(other.text.clone()),
                to_source_span(&other.span),
            )],
            None => Vec::new(),
        };
        Report {
            headline,
            code,
            severity: miette::Severity::Advice,
            help: None,
            source,
            labels,
            related: Vec::new(),
        }
    }
}

/// A rule file as miette's source. miette counts the column of its
/// `[file:line:column]` header in bytes; this counts characters instead, so
/// the text header and the JSON `column` agree on lines with non-ASCII text.
/// It hands miette only the lines around a span (found in the line index),
/// so a report costs the same at the end of a large file as at its start.
struct Source<'s> {
    name: String,
    lines: &'s Lines<'s>,
}

impl SourceCode for Source<'_> {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let text = self.lines.text();
        let start = span.offset().min(text.len());
        let end = (span.offset() + span.len()).min(text.len());
        let (start_line, end_line) = (self.lines.line_of(start), self.lines.line_of(end));
        // Context lines too long to show are left out, like the labels on
        // them (`snippet`).
        let short = |line: usize| self.lines.line_range(line).len() <= MAX_SNIPPET_LINE;
        let context_lines_before = (1..=context_lines_before.min(start_line))
            .take_while(|k| short(start_line - k))
            .count();
        let context_lines_after = (1..=context_lines_after)
            .take_while(|k| short(end_line + k))
            .count();
        // A window of whole lines, a line more than miette asks for on each
        // side: it then finds in the window what it would in the file.
        let first = start_line.saturating_sub(context_lines_before + 1);
        let last = end_line + context_lines_after + 1;
        let base = self.lines.start_of(first);
        let window_end = self.lines.start_of(last + 1);
        let window = text.get(base..window_end).unwrap_or(text);
        let base = if window.len() == text.len() { 0 } else { base };
        let inner = window.read_span(
            &SourceSpan::from((span.offset() - base, span.len())),
            context_lines_before,
            context_lines_after,
        )?;
        let line_offset = if base == 0 { 0 } else { first };
        // miette reports a column only without context lines before; then
        // it is the byte count from the line start to the span.
        let column = match inner.column() {
            0 => 0,
            bytes => {
                let line_start = start.saturating_sub(bytes);
                text.get(line_start..start)
                    .map_or(bytes, |before| before.chars().count())
            }
        };
        let inner_span = inner.span();
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            SourceSpan::from((inner_span.offset() + base, inner_span.len())),
            inner.line() + line_offset,
            column,
            inner.line_count(),
        )))
    }
}

fn to_source_span(span: &Range<usize>) -> SourceSpan {
    SourceSpan::from((span.start, span.end.saturating_sub(span.start)))
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Report")
            .field("code", &self.code)
            .field("headline", &self.headline)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
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
    fn a_label_on_a_very_long_line_is_shown_by_position() {
        let text = format!("{}# x\nname = 1\n", " ".repeat(70_000));
        let files = vec![SourceFile {
            name: "l.toml".into(),
            text,
        }];
        let on_long = Diagnostic::warning(Code::Toml, "far right")
            .in_file("l.toml")
            .at(70_000..70_003, "here")
            .with_related("l.toml", 70_004..70_008, "and here");
        let on_short = Diagnostic::error(Code::Toml, "fine")
            .in_file("l.toml")
            .at(70_004..70_008, "name")
            .with_related("l.toml", 0..1, "far left");
        for style in [TextStyle::Plain, TextStyle::Fancy] {
            let text = render_text(&[on_long.clone(), on_short.clone()], &files, style);
            assert!(text.contains("l.toml:1:70001: far right (here)"), "{text}");
            assert!(text.contains("l.toml:2:1: fine (name)"), "{text}");
            assert!(text.contains("l.toml:1:1: far left (l.toml)"), "{text}");
            // The related label on the short line keeps its snippet (line 2).
            assert!(
                style == TextStyle::Fancy || text.contains("[l.toml:2:1]"),
                "{text}"
            );
            assert!(text.contains("and here"), "{text}");
            assert!(text.len() < 2000, "{text}");
        }
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
