//! `rulec fix DIR` (docs/rulec.md#rulec-fix): rewrites the `when` strings of
//! rule files written for the Go event-service into this language, in
//! place, touching only the bytes of those strings; `--dry-run` prints a
//! unified diff instead. What it cannot rewrite, and whatever else is
//! wrong, is reported with the normal diagnostics of the fixed files.

mod rewrite;
mod udiff;

pub use rewrite::{rewrite, Edit, Rewrite, Unrewritable, Why};

use crate::check::{plural, shown, shown_path};
use crate::cli::{Console, Exit};
use crate::diagnostic::{render_text, Code, Diagnostic, Severity};
use crate::load::{load_dir, SourceFile};
use crate::session::Session;
use crate::span::StringMap;
use rulecore::codec::BundleError;
use rulecore_io::bundle_file::write_atomic;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use toml::de::{DeTable, DeValue};

/// `rulec fix` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec fix rules/ --dry-run     (print a unified diff, change nothing)
  rulec fix rules/
  rulec fix rules/alarm.toml

Rewrites `when` in the Go event-service's syntax: 'single quotes' become
\"double quotes\", and/or/not become &&/||/!, `x in [a, b]` becomes
`contains((a, b), x)`. Nothing outside the `when` strings changes:
comments and layout stay. An `in [...]` whose meaning the rewrite could
change (`a + b in [...]`, an empty list) is reported, with every other
problem the fixed files still have.

Exit status: 0 the fixed files check clean, 1 problems remain (nothing
is left half-written: each file is replaced whole), 2 usage or I/O error.")]
pub struct FixArgs {
    /// The rules directory (its `*.toml` files), or one rule file.
    pub dir: PathBuf,
    /// Print what would change as a unified diff; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// One `when` string of a rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WhenString {
    /// The value's bytes in the file, quotes included.
    span: Range<usize>,
    decoded: String,
    rule: Option<String>,
    step: Option<usize>,
}

/// Every `when` string of a file that parses as TOML: the rules' and
/// their steps'.
fn when_strings(text: &str) -> Vec<WhenString> {
    let Ok(document) = DeTable::parse(text) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let table = document.get_ref();
    let Some(DeValue::Array(rules)) = table.get("rule").map(|v| v.get_ref()) else {
        return found;
    };
    for rule in rules {
        let DeValue::Table(rule) = rule.get_ref() else {
            continue;
        };
        let name = rule
            .get("name")
            .and_then(|v| v.get_ref().as_str())
            .map(str::to_string);
        let mut push = |table: &DeTable<'_>, step: Option<usize>| {
            if let Some(value) = table.get("when") {
                if let Some(decoded) = value.get_ref().as_str() {
                    found.push(WhenString {
                        span: value.span(),
                        decoded: decoded.to_string(),
                        rule: name.clone(),
                        step,
                    });
                }
            }
        };
        push(rule, None);
        if let Some(DeValue::Array(steps)) = rule.get("step").map(|v| v.get_ref()) {
            for (index, step) in steps.iter().enumerate() {
                if let DeValue::Table(step) = step.get_ref() {
                    push(step, Some(index));
                }
            }
        }
    }
    found
}

/// Text for inside a basic (`"..."`) TOML string.
fn escape_basic(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The fixed text of one file, what changed and what could not be.
#[derive(Debug, Clone, Default)]
struct FileFix {
    text: String,
    /// `when` strings changed.
    changed: usize,
    /// Not rewritable, positioned in the fixed text.
    diagnostics: Vec<Diagnostic>,
    /// Each replacement's bytes in the old text and in the new, in order.
    changes: Vec<udiff::Change>,
}

/// A file range and the text that replaces it.
type Replacement = (Range<usize>, String);

/// A file range that cannot be rewritten, what it is and why.
type Unfixed = (Range<usize>, &'static str, Why);

/// The file replacements for one `when` string, and the file ranges of
/// what cannot be rewritten.
fn string_fix(file_text: &str, when: &WhenString) -> (Vec<Replacement>, Vec<Unfixed>) {
    let result = rewrite(&when.decoded);
    let map = StringMap::new(file_text, when.span.clone(), &when.decoded);
    if !map.is_exact() || (result.edits.is_empty() && result.unrewritable.is_empty()) {
        return (Vec::new(), Vec::new());
    }
    let raw = &file_text[when.span.clone()];
    let literal = raw.starts_with('\'');
    let single_line_basic = raw.starts_with('"') && !raw.starts_with("\"\"\"");
    let unrewritable = result
        .unrewritable
        .iter()
        .map(|u| (map.map(u.range.clone()), u.what, u.why))
        .collect::<Vec<_>>();
    let fixed = result.apply(&when.decoded);
    // A one-line "..." string whose expression now holds double quotes
    // reads best as a literal '...' string (docs/when-language.md).
    if single_line_basic
        && unrewritable.is_empty()
        && !fixed.contains('\'')
        && !fixed.chars().any(char::is_control)
    {
        return (vec![(when.span.clone(), format!("'{fixed}'"))], Vec::new());
    }
    let edits = result
        .edits
        .iter()
        .map(|edit| {
            let text = if literal {
                edit.text.clone()
            } else {
                escape_basic(&edit.text)
            };
            (map.map(edit.range.clone()), text)
        })
        .collect();
    (edits, unrewritable)
}

/// Fixes one file.
fn fix_file(file: &SourceFile) -> FileFix {
    let mut replacements = Vec::new();
    let mut problems = Vec::new();
    let mut changed = 0;
    for when in when_strings(&file.text) {
        let (edits, unrewritable) = string_fix(&file.text, &when);
        changed += usize::from(!edits.is_empty());
        replacements.extend(edits);
        problems.extend(
            unrewritable
                .into_iter()
                .map(|(range, what, why)| (range, what, why, when.clone())),
        );
    }
    replacements.sort_by_key(|(range, _)| range.start);
    let mut text = String::with_capacity(file.text.len());
    let mut changes = Vec::with_capacity(replacements.len());
    let mut at = 0;
    for (range, replacement) in &replacements {
        text.push_str(&file.text[at..range.start]);
        let start = text.len();
        text.push_str(replacement);
        changes.push((range.clone(), start..text.len()));
        at = range.end;
    }
    text.push_str(&file.text[at..]);
    // Where an offset of the old text is in the new one: after the last
    // replacement that ends at or before it, shifted as that one's end is.
    let moved = |offset: usize| -> usize {
        let before = changes.partition_point(|(old, _): &udiff::Change| old.end <= offset);
        match before.checked_sub(1).and_then(|i| changes.get(i)) {
            Some((old, new)) => offset - old.end + new.end,
            None => offset,
        }
    };
    let diagnostics = problems
        .into_iter()
        .map(|(range, what, why, when)| {
            let mut diagnostic = Diagnostic::error(
                Code::WhenSyntax,
                format!("{what} cannot be rewritten: {}", why.message()),
            )
            .in_file(&file.name)
            .at(moved(range.start)..moved(range.end), "left as it was")
            .with_help(why.help());
            diagnostic.rule = when.rule;
            diagnostic.step = when.step;
            diagnostic
        })
        .collect();
    FileFix {
        text,
        changed,
        diagnostics,
        changes,
    }
}

/// Replaces each fixed file whole, the way a bundle is written (a random,
/// exclusively created temporary file, then a rename), keeping its mode.
/// A symbolic link is never replaced by a file: if any file to fix is one,
/// nothing is written and the error names its target. `Some(exit)` after
/// an error was printed.
fn write_fixed(
    writes: &[(PathBuf, usize)],
    fixed: &[SourceFile],
    console: &mut Console<'_>,
) -> io::Result<Option<Exit>> {
    for (path, _) in writes {
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            let target = std::fs::read_link(path).map_or_else(
                |error| format!("(unreadable: {error})"),
                |t| t.display().to_string(),
            );
            writeln!(
                console.err,
                "error: {} is a symbolic link to {target}: not replaced, nothing written; \
                 run rulec fix on {target} itself",
                path.display()
            )?;
            return Ok(Some(Exit::Usage));
        }
    }
    for (path, index) in writes {
        if let Err(error) = write_atomic(path, fixed[*index].text.as_bytes()) {
            let cause: &dyn std::fmt::Display = match &error {
                BundleError::Io { source, .. } => source,
                other => other,
            };
            writeln!(
                console.err,
                "error: cannot write {}: {cause}",
                path.display()
            )?;
            return Ok(Some(Exit::Usage));
        }
    }
    Ok(None)
}

/// Runs `rulec fix`.
pub fn run(args: &FixArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let loaded = match load_dir(&args.dir) {
        Ok(loaded) if loaded.missing => {
            writeln!(console.err, "error: {} does not exist", args.dir.display())?;
            return Ok(Exit::Usage);
        }
        Ok(loaded) => loaded,
        Err(error) => {
            writeln!(console.err, "error: {error}")?;
            return Ok(Exit::Usage);
        }
    };
    let single = args.dir.is_file();
    let mut fixed_files = Vec::new();
    let mut problems = loaded.diagnostics.clone();
    let (mut strings, mut files) = (0, 0);
    // Each file to replace, and its fixed text's index in `fixed_files`.
    let mut writes = Vec::new();
    for file in &loaded.files {
        let shown_name = shown_path(&args.dir, &file.name);
        let fix = fix_file(file);
        problems.extend(fix.diagnostics);
        if fix.text != file.text {
            strings += fix.changed;
            files += 1;
            if args.dry_run {
                // Both headers name the file as given: `patch -p0` applies it.
                let diff = udiff::unified_diff(&file.text, &fix.text, &fix.changes, &shown_name);
                write!(console.out, "{diff}")?;
            } else {
                let path = if single {
                    args.dir.clone()
                } else {
                    args.dir.join(&file.name)
                };
                writes.push((path, fixed_files.len()));
            }
        }
        fixed_files.push(SourceFile {
            name: file.name.clone(),
            text: fix.text,
        });
    }
    if let Some(exit) = write_fixed(&writes, &fixed_files, console)? {
        return Ok(exit);
    }
    // Held to the rule format alone (no profile): a rewrite is judged by
    // what it writes, not by the bus it will run on.
    let validated = Session::new(None).check_files(&fixed_files);
    problems.extend(validated.diagnostics);
    let (problems, shown_files) = shown(&problems, &fixed_files, &args.dir);
    console
        .err
        .write_all(render_text(&problems, &shown_files, console.style).as_bytes())?;
    let errors = problems
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let written = if args.dry_run { "would fix" } else { "fixed" };
    writeln!(
        console.err,
        "{written} {} in {}; {} left",
        plural(strings, "`when` string"),
        plural(files, "file"),
        plural(errors, "error"),
    )?;
    Ok(if errors > 0 {
        Exit::Failure
    } else {
        Exit::Success
    })
}
