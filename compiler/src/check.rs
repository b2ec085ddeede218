//! `rulec check DIR` (docs/rulec.md): load and validate a rules directory,
//! print every diagnostic and a one-line summary.
//!
//! Output: text diagnostics and the summary go to stderr. With
//! `--format json`, each diagnostic is one JSON object per line on **stdout**
//! (it is data for a machine, docs/rulec.md "data to stdout"), and the summary
//! line still goes to stderr.

use crate::cli::{Console, Exit};
use crate::diagnostic::{render_text_with, to_json_with, Code, Diagnostic, Severity, Sources};
use crate::load::{load_dir, LoadError, Loaded, SourceFile};
use crate::profile::{LoadedProfile, ProfileChoice};
use crate::session::Session;
use crate::validate::CheckedRule;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `--profile`, shared by `check`, `build`, `simulate`, `test` and `diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProfileArgs {
    /// The bus profile (docs/sources.md): `librescoot` (built in), `none`
    /// (no sources: events only from the bus), or a profile directory
    /// (`./librescoot` for a directory of that name).
    #[arg(long, value_name = "librescoot|none|DIR", default_value = "librescoot")]
    pub profile: ProfileChoice,
}

/// Output format of `rulec check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// reports for people on stderr: the file, rule and step, the line with
    /// the problem marked, and a hint (coloured on a terminal, plain otherwise)
    #[default]
    Text,
    /// one JSON object per diagnostic per line on stdout (file, rule, step,
    /// severity, code, message, span, line, column)
    Json,
}

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec check /etc/rules
  rulec check rules/ --deny-warnings
  rulec check rules/ --format json > problems.jsonl
  rulec check rules/alarm.toml            (one file, checked alone)

A summary line ends the output on stderr, for example
  3 files, 12 rules: 2 errors, 1 warning
An error rejects its rule (a TOML syntax error or unknown key: its whole
file); warnings reject nothing, unless --deny-warnings makes them errors.
Every diagnostic has a code, such as rulec::duration, explained in
docs/diagnostics.md.

Exit status: 0 clean (warnings allowed), 1 errors (or warnings with
--deny-warnings), 2 usage or I/O error: an unreadable rule file (also a
dangling link) or a missing path ending in .toml. A missing directory holds
no rules (exit 0, with a note).")]
pub struct CheckArgs {
    /// The rules directory (its `*.toml` files, not recursive), or one rule file.
    pub dir: PathBuf,
    /// How to print diagnostics.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Make every warning an error (exit 1).
    #[arg(long)]
    pub deny_warnings: bool,
    #[command(flatten)]
    pub profile: ProfileArgs,
}

/// Everything `check` learned about a rules directory; `build` starts here.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// The readable rule files, in order (their text renders diagnostics).
    pub files: Vec<SourceFile>,
    /// Rule files found, including ones that could not be decoded.
    pub file_count: usize,
    /// Rule tables read from files that parsed.
    pub rules_read: usize,
    /// [`Self::rules_read`] of each of [`Self::files`].
    pub rules_read_by_file: Vec<usize>,
    /// The directory does not exist (no rules: not an error).
    pub missing_dir: bool,
    /// Directory entries that are not rule files, for notes.
    pub skipped: Vec<crate::load::Skipped>,
    /// The rules that survived, in bundle order.
    pub rules: Vec<CheckedRule>,
    pub diagnostics: Vec<Diagnostic>,
    /// Warnings that `--deny-warnings` made errors (counted in `errors`).
    pub denied_warnings: usize,
    /// The topic catalogue the rules were held against (for editors).
    pub topics: Vec<crate::validate::CatalogueTopic>,
    /// The bus profile the rules are checked against and built with
    /// (`None`: `--profile none`); its diagnostics point into its own files.
    pub profile: Option<Arc<LoadedProfile>>,
    /// The rules directory's `[[guard]]` and `[[limit]]` tables
    /// (docs/safety.md); the profile's are in its declarations.
    pub envelope: crate::envelope::EnvelopeDecls,
    /// The rule files whose guards or limits an error left out of
    /// [`Self::envelope`], and two guards or limits with one name: no
    /// bundle is written then, even with `--partial`
    /// (docs/safety.md#adding-to-it).
    pub envelope_broken: Vec<String>,
}

impl CheckReport {
    /// Every guard and limit the bundle carries: the profile's, then the
    /// rules directory's.
    pub fn all_envelope(&self) -> crate::envelope::EnvelopeDecls {
        let mut all = self
            .profile
            .as_ref()
            .map(|profile| profile.decls.envelope.clone())
            .unwrap_or_default();
        all.extend(self.envelope.clone());
        all
    }
}

impl CheckReport {
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    /// The profile's catalogue, which checks rules against the bus.
    pub fn catalogue(&self) -> Option<&crate::profile::Catalogue> {
        self.profile.as_deref().map(|profile| &profile.catalogue)
    }

    /// The profile's diagnostics, and the rules' (in that order).
    fn all_diagnostics(&self) -> impl Iterator<Item = &Diagnostic> {
        self.profile
            .iter()
            .flat_map(|profile| &profile.diagnostics)
            .chain(&self.diagnostics)
    }

    fn count(&self, severity: Severity) -> usize {
        self.all_diagnostics()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// Whether the check fails: errors, or warnings when they are denied.
    pub fn failed(&self, deny_warnings: bool) -> bool {
        self.errors() > 0 || (deny_warnings && self.warnings() > 0)
    }

    /// `3 files, 12 rules: 2 errors, 1 warning`; with denied warnings
    /// `... 3 errors (1 denied warning), 0 warnings`.
    pub fn summary(&self) -> String {
        let mut errors = plural(self.errors(), "error");
        if self.denied_warnings > 0 {
            errors.push_str(&format!(
                " ({})",
                plural(self.denied_warnings, "denied warning")
            ));
        }
        format!(
            "{}, {}: {errors}, {}",
            plural(self.file_count, "file"),
            plural(self.rules_read, "rule"),
            plural(self.warnings(), "warning"),
        )
    }
}

/// `1 file`, `2 files`, `0 files`.
pub fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("{count} {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// [`Session::check`]: a rules directory, or one rule file checked with
/// its directory.
pub(crate) fn check_path(path: &Path, session: &mut Session) -> Result<CheckReport, LoadError> {
    if path.is_file() {
        return check_file_in_directory(path, session);
    }
    Ok(check_loaded(load_dir(path)?, session))
}

/// `rulec check FILE` (docs/rulec.md#one-file): the file is checked with
/// its directory's other files (their topics, inputs and rule names) and
/// the profile, and only its own diagnostics and rules are kept; so it
/// gets exactly the answer checking the directory gives for it. A
/// directory that cannot be read leaves the file checked alone.
fn check_file_in_directory(path: &Path, session: &mut Session) -> Result<CheckReport, LoadError> {
    let alone = load_dir(path)?;
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (Some(file), Ok(mut loaded)) = (alone.files.first().cloned(), load_dir(parent)) else {
        return Ok(check_loaded(alone, session));
    };
    // The file as read now, even when the directory would skip it (a
    // hidden name, another extension).
    loaded.overlay(&file.name, &file.text);
    loaded.skipped.clear();
    let mut report = check_loaded(loaded, session);
    let position = report.files.iter().position(|f| f.name == file.name);
    report.rules_read = position
        .and_then(|at| report.rules_read_by_file.get(at).copied())
        .unwrap_or(0);
    report
        .diagnostics
        .retain(|d| d.file.as_deref() == Some(file.name.as_str()));
    report.rules.retain(|rule| rule.source == file.name);
    report.denied_warnings = report
        .diagnostics
        .iter()
        .filter(|d| crate::validate::is_denied(d))
        .count();
    report.file_count = 1;
    Ok(report)
}

/// [`Session::check_loaded`]: validates rule files already read, reusing
/// the session's checks of the files whose text it saw before.
pub(crate) fn check_loaded(loaded: Loaded, session: &mut Session) -> CheckReport {
    let validated = session.check_files(&loaded.files);
    let mut diagnostics = loaded.diagnostics;
    diagnostics.extend(validated.diagnostics);
    // Guards only add: a name the profile or another file has is an error.
    let mut envelope = session
        .profile()
        .map(|profile| profile.decls.envelope.clone())
        .unwrap_or_default();
    envelope.extend(validated.envelope.clone());
    let names = crate::envelope::check_names(&envelope);
    let mut envelope_broken = validated.envelope_broken;
    for file in names.iter().filter_map(|d| d.file.as_ref()) {
        if !envelope_broken.contains(file) {
            envelope_broken.push(file.clone());
        }
    }
    diagnostics.extend(names);
    // docs/safety-checks.md#guards: the profile's guards and the
    // directory's together.
    let catalogue = session.profile().map(|profile| &profile.catalogue);
    let mut guarded = crate::safety::check_guards(&validated.rules, &envelope, catalogue);
    let denied_guarded = if session.denies_warnings() {
        crate::validate::deny(&mut guarded)
    } else {
        0
    };
    diagnostics.extend(guarded);
    // Report in file order (docs/rules.md: byte-wise by name), a file's
    // encoding error among the others rather than ahead of them all; the
    // sort is stable, so each file keeps its own order.
    diagnostics.sort_by(|a, b| {
        let name = |d: &Diagnostic| d.file.as_ref().map(|f| f.as_bytes().to_vec());
        name(a).cmp(&name(b))
    });
    CheckReport {
        file_count: loaded.files.len() + diagnostics_for_unreadable(&diagnostics),
        files: loaded.files,
        rules_read: validated.rules_read,
        rules_read_by_file: validated.rules_read_by_file,
        missing_dir: loaded.missing,
        skipped: loaded.skipped,
        rules: validated.rules,
        diagnostics,
        denied_warnings: validated.denied_warnings + denied_guarded,
        topics: validated.topics,
        profile: session.profile().cloned(),
        envelope: validated.envelope,
        envelope_broken,
    }
}

fn diagnostics_for_unreadable(diagnostics: &[Diagnostic]) -> usize {
    diagnostics
        .iter()
        .filter(|d| d.code == Code::Encoding)
        .count()
}

/// The start that `check`, `build` and `simulate` share: check `dir` and
/// print its diagnostics in `format`. `Err(Exit::Usage)` after an
/// unreadable directory or file was reported.
pub(crate) fn check_and_print(
    dir: &Path,
    deny_warnings: bool,
    format: Format,
    profile: &ProfileChoice,
    console: &mut Console<'_>,
) -> io::Result<Result<CheckReport, Exit>> {
    let mut session = match Session::open(profile) {
        Ok(session) => session.deny_warnings(deny_warnings),
        Err(error) => {
            writeln!(console.err, "error: {error}")?;
            return Ok(Err(Exit::Usage));
        }
    };
    if let Some(profile) = session.profile() {
        print_profile(profile, format, console)?;
    }
    let report = match session.check(dir) {
        Ok(report) => report,
        Err(error) => {
            writeln!(console.err, "error: {error}")?;
            return Ok(Err(Exit::Usage));
        }
    };
    print_report(&report, dir, format, console)?;
    for skipped in &report.skipped {
        let note = format!("note: {}: {skipped}", dir.display());
        if console.noted.insert(note.clone()) {
            writeln!(console.err, "{note}")?;
        }
    }
    Ok(Ok(report))
}

/// Runs `rulec check`.
pub fn run(args: &CheckArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let report = match check_and_print(
        &args.dir,
        args.deny_warnings,
        args.format,
        &args.profile.profile,
        console,
    )? {
        Ok(report) => report,
        Err(exit) => return Ok(exit),
    };
    if report.missing_dir {
        writeln!(
            console.err,
            "note: {} does not exist: no rules",
            args.dir.display()
        )?;
    }
    writeln!(console.err, "{}", report.summary())?;
    Ok(if report.failed(args.deny_warnings) {
        Exit::Failure
    } else {
        Exit::Success
    })
}

/// How a rule file is named in diagnostics (docs/rulec.md#file-names):
/// relative to the current directory, as the command line gave its
/// directory (`some/dir/b.toml` for `rulec check some/dir`), or the file as
/// given; so that terminals and editors can open it. Inside the bundle a
/// rule's `source` stays the bare file name.
pub fn shown_path(dir: &Path, name: &str) -> String {
    shown_in(dir, dir.is_file(), name)
}

/// [`shown_path`] with `dir.is_file()` asked once by the caller: a report
/// names thousands of files, and each answer is a system call.
fn shown_in(dir: &Path, dir_is_file: bool, name: &str) -> String {
    if dir_is_file {
        // The file as given; another file of its directory (a related
        // label: the first definition of a name) beside it.
        if dir.file_name() == Some(std::ffi::OsStr::new(name)) {
            return dir.display().to_string();
        }
        return match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => parent.join(name).display().to_string(),
            None => name.to_string(),
        };
    }
    if dir.as_os_str() == "." {
        return name.to_string();
    }
    dir.join(name).display().to_string()
}

/// Diagnostics and files with every file named by [`shown_path`].
pub(crate) fn shown(
    diagnostics: &[Diagnostic],
    files: &[SourceFile],
    dir: &Path,
) -> (Vec<Diagnostic>, Vec<SourceFile>) {
    let dir_is_file = dir.is_file();
    let rename = |name: &str| shown_in(dir, dir_is_file, name);
    let diagnostics = diagnostics
        .iter()
        .cloned()
        .map(|mut diagnostic| {
            diagnostic.file = diagnostic.file.as_deref().map(rename);
            for related in &mut diagnostic.related {
                related.file = rename(&related.file);
            }
            diagnostic
        })
        .collect();
    let files = files
        .iter()
        .map(|file| SourceFile {
            name: rename(&file.name),
            text: file.text.clone(),
        })
        .collect();
    (diagnostics, files)
}

/// Prints a profile's diagnostics (its files are named as they are shown).
fn print_profile(
    profile: &LoadedProfile,
    format: Format,
    console: &mut Console<'_>,
) -> io::Result<()> {
    let sources = Sources::new(&profile.files);
    match format {
        Format::Text => {
            let text = render_text_with(&profile.diagnostics, &sources, console.style);
            console.err.write_all(text.as_bytes())?;
        }
        Format::Json => {
            for diagnostic in &profile.diagnostics {
                writeln!(console.out, "{}", to_json_with(diagnostic, &sources))?;
            }
        }
    }
    if profile.errors() > 0 {
        writeln!(
            console.err,
            "profile `{}`: {}: the rules are not built with it",
            profile.name,
            plural(profile.errors(), "error")
        )?;
    }
    Ok(())
}

/// How many diagnostics of one file are printed; the rest are counted in
/// one "and N more" line (docs/diagnostics.md#output). Thousands of
/// reports of one file help nobody, and printing them costs time.
pub const MAX_SHOWN_PER_FILE: usize = 100;

/// Prints the diagnostics in `format` (not the summary), at most
/// [`MAX_SHOWN_PER_FILE`] of each file.
fn print_report(
    report: &CheckReport,
    dir: &Path,
    format: Format,
    console: &mut Console<'_>,
) -> io::Result<()> {
    let (diagnostics, files) = shown(&report.diagnostics, &report.files, dir);
    let sources = Sources::new(&files);
    // `check_loaded` sorted them by file.
    for of_file in diagnostics.chunk_by(|a, b| a.file == b.file) {
        let (shown, hidden) = of_file.split_at(of_file.len().min(MAX_SHOWN_PER_FILE));
        match format {
            Format::Text => {
                let text = render_text_with(shown, &sources, console.style);
                console.err.write_all(text.as_bytes())?;
            }
            Format::Json => {
                for diagnostic in shown {
                    writeln!(console.out, "{}", to_json_with(diagnostic, &sources))?;
                }
            }
        }
        if hidden.is_empty() {
            continue;
        }
        let errors = hidden
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        let warnings = hidden.len() - errors;
        let file = of_file[0].file.as_deref();
        match format {
            Format::Text => writeln!(
                console.err,
                "... and {} in {} ({}, {}), not shown\n",
                plural(hidden.len(), "more diagnostic"),
                file.unwrap_or("the rules directory"),
                plural(errors, "error"),
                plural(warnings, "warning"),
            )?,
            Format::Json => {
                let line = serde_json::json!({
                    "file": file,
                    "omitted": hidden.len(),
                    "errors": errors,
                    "warnings": warnings,
                });
                writeln!(console.out, "{line}")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_pluralises_exactly() {
        let mut report = CheckReport {
            file_count: 1,
            rules_read: 12,
            ..CheckReport::default()
        };
        report
            .diagnostics
            .push(Diagnostic::warning(Code::Duration, "w"));
        assert_eq!(report.summary(), "1 file, 12 rules: 0 errors, 1 warning");
        report
            .diagnostics
            .push(Diagnostic::error(Code::Duration, "e"));
        report
            .diagnostics
            .push(Diagnostic::error(Code::Duration, "e"));
        report.file_count = 3;
        report.rules_read = 1;
        assert_eq!(report.summary(), "3 files, 1 rule: 2 errors, 1 warning");
        assert!(report.failed(false));
    }

    #[test]
    fn missing_directory_is_no_rules() {
        let report = Session::new(None)
            .check(Path::new("/nonexistent/rules/dir"))
            .unwrap();
        assert!(report.missing_dir);
        assert_eq!(report.summary(), "0 files, 0 rules: 0 errors, 0 warnings");
        assert!(!report.failed(true));
    }
}
