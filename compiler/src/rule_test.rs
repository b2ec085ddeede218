//! `rulec test [DIR | FILES]` (docs/rulec.md#rulec-test): simulates every
//! timeline that carries `[[expect]]`/`[[expect-none]]` entries and checks
//! the output against them, one pass or fail per file.

pub mod coverage;
mod expect;
mod junit;

pub use expect::{
    close_key as close_expectation_key, parse as parse_expectations,
    parse_all as parse_all_expectations,
};
pub use expect::{ExpectError, Expectation, When, FIELDS as EXPECTATION_FIELDS};

use crate::check::plural;
use crate::cli::{Console, Exit};
use crate::simulate::html;
use crate::simulate::{load_rules_known, print_timeline_problems};
use crate::timeline::Known;
use rulecore::bundle::Payload;
use ruled_engine::sim::{parse, simulate_with, Line, Options};
use serde_json::Value;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `rulec test` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec test fixtures/rules
  rulec test fixtures/rules/tests/hazards.toml --format json
  rulec test rules/ --junit report.xml
  rulec test rules/ --html failed/     # a picture of each failing test
  rulec test rules/ --coverage --coverage-out rules.info   # what the tests reach

A test is a timeline (see `rulec simulate --help`) with expectations:

  [[event]]
  at = \"0s\"
  topic = \"alarm.triggered\"
  [[expect]]                # kind defaults to \"action\"
  rule = \"hazards-on-alarm\"
  push = \"off\"
  at = \"30s\"                # or between = [\"10s\", \"20s\"]; count = N
  [[expect-none]]
  kind = \"eval-error\"

Any output field (rule, step, pass, push, reason, ...) selects lines.
Described in docs/rulec.md.

Exit status: 0 every test passed, 1 a test failed (or its rules, timeline
or expectations are wrong), 2 usage or I/O error.")]
pub struct TestArgs {
    /// A rules directory (its tests are `DIR/tests/*.toml`), or test files.
    #[arg(default_value = ".")]
    pub paths: Vec<PathBuf>,
    /// The rules for test files given by name; default: the folder above
    /// each file's folder (`DIR` of `DIR/tests/x.toml`).
    #[arg(long, value_name = "DIR")]
    pub rules: Option<PathBuf>,
    /// `text` (one line per test, a failure shown against the output) or
    /// `json` (one object per test).
    #[arg(long, value_enum, default_value_t = TestFormat::Text)]
    pub format: TestFormat,
    /// Also write the results as JUnit XML, for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write one HTML page per failing test into DIR (made if
    /// missing): the timeline picture of `rulec simulate --html`, the
    /// expectation above it, the lines in question ringed.
    #[arg(long, value_name = "DIR")]
    pub html: Option<PathBuf>,
    /// After the tests, print per rule what they covered: runs, events
    /// matched, each `when` seen true and false, each step and finally
    /// step reached; then what was not covered (a table, or with
    /// `--format json` one more object).
    #[arg(long)]
    pub coverage: bool,
    /// Also write the coverage in lcov format (rule files' lines: each
    /// `on`, step table and `when`), for CI coverage tools and genhtml.
    #[arg(long, value_name = "FILE")]
    pub coverage_out: Option<PathBuf>,
    #[command(flatten)]
    pub profile: crate::check::ProfileArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestFormat {
    Text,
    Json,
}

/// One test file's result.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    /// As given or found (relative to the current directory when the
    /// directory was).
    pub file: String,
    pub expectations: usize,
    pub outcome: Outcome,
    /// With `--html`, a failed test's page.
    pub page: Option<String>,
}

/// How one test file went.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    /// The first expectation not met, what was wrong, and the simulated
    /// output as text lines, with the indices of the lines to point at.
    Fail {
        expectation: String,
        problem: String,
        output: Vec<String>,
        marked: Vec<usize>,
    },
    /// The test could not run: its rules, timeline or expectations.
    Error {
        message: String,
    },
}

/// The files to run, each with its rules directory.
fn plan(args: &TestArgs) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    if let [dir] = args.paths.as_slice() {
        if dir.is_dir() {
            let tests = dir.join("tests");
            let mut files: Vec<PathBuf> = match std::fs::read_dir(&tests) {
                Ok(entries) => entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
                    .collect(),
                Err(error) => return Err(format!("cannot read {}: {error}", tests.display())),
            };
            files.sort();
            let rules = args.rules.clone().unwrap_or_else(|| dir.clone());
            return Ok(files.into_iter().map(|f| (f, rules.clone())).collect());
        }
    }
    args.paths
        .iter()
        .map(|file| {
            if !file.is_file() {
                return Err(format!(
                    "no such test file or rules directory {}",
                    file.display()
                ));
            }
            let rules = match &args.rules {
                Some(rules) => rules.clone(),
                None => file
                    .parent()
                    .and_then(Path::parent)
                    .map(|dir| {
                        if dir.as_os_str().is_empty() {
                            Path::new(".")
                        } else {
                            dir
                        }
                    })
                    .map(Path::to_path_buf)
                    .ok_or_else(|| {
                        format!("{}: give the rules with --rules DIR", file.display())
                    })?,
            };
            Ok((file.clone(), rules))
        })
        .collect()
}

/// Rule sets by path, each loaded (and its diagnostics printed) once,
/// with what their tests are checked against; `None`: it does not build.
type Loaded = HashMap<PathBuf, Option<(Arc<Payload>, Arc<Known>)>>;

/// The rules of `rules`, loaded (and their diagnostics printed) the first
/// time they are asked for; `None`: they do not build.
fn load_once(
    rules: &Path,
    profile: &crate::profile::ProfileChoice,
    loaded: &mut Loaded,
    console: &mut Console<'_>,
) -> io::Result<Option<(Arc<Payload>, Arc<Known>)>> {
    if !loaded.contains_key(rules) {
        let rule_set = load_rules_known(rules, profile, console)?
            .ok()
            .map(|(payload, topics)| {
                let mut known = Known {
                    topics,
                    ..Known::default()
                };
                known.add_rules(&payload);
                (Arc::new(payload), Arc::new(known))
            });
        loaded.insert(rules.to_path_buf(), rule_set);
    }
    Ok(loaded.get(rules).cloned().flatten())
}

/// What the test files of one `rulec test` share.
struct Session<'a> {
    profile: &'a crate::profile::ProfileChoice,
    loaded: Loaded,
    /// `--html`: draw a failed test's page.
    draw: bool,
    /// `--coverage` or `--coverage-out`: what each simulation reached.
    coverage: Option<coverage::Coverages>,
}

/// Runs one test file: `None` when it carries no expectations.
fn run_file(
    file: &Path,
    rules: &Path,
    session: &mut Session<'_>,
    console: &mut Console<'_>,
) -> io::Result<Option<TestResult>> {
    let name = file.display().to_string();
    let error = |message: String| {
        Some(TestResult {
            file: name.clone(),
            expectations: 0,
            outcome: Outcome::Error { message },
            page: None,
        })
    };
    let text = match crate::simulate::read_timeline(file) {
        Ok(text) => text,
        Err(reason) => return Ok(error(format!("cannot read the test: {reason}"))),
    };
    // Every problem of the file, each at its line and column, on stderr
    // (docs/simulation.md#checks); the result names how many.
    let problems = |known: Option<&Known>, console: &mut Console<'_>| {
        print_timeline_problems(file, &text, known, console)
    };
    let broken =
        |console: &mut Console<'_>, known: Option<&Known>| -> io::Result<Option<TestResult>> {
            problems(known, console)?;
            Ok(error(
                "the test file has problems (shown above)".to_string(),
            ))
        };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return broken(console, None);
    };
    let expectations = match expect::parse_all(&table) {
        Ok(expectations) if expectations.is_empty() => return Ok(None),
        Ok(expectations) => expectations,
        Err(_) => return broken(console, None),
    };
    let Ok(timeline) = parse(&text).map(crate::timeline::with_zone) else {
        return broken(console, None);
    };
    let Some((payload, known)) = load_once(rules, session.profile, &mut session.loaded, console)?
    else {
        return Ok(error(format!(
            "the rules in {} do not build",
            rules.display()
        )));
    };
    if problems(Some(&known), console)? {
        return Ok(error(
            "the test file has problems (shown above)".to_string(),
        ));
    }
    let options = Options {
        explain: true,
        ..Options::default()
    };
    let outcome = match simulate_with(Arc::clone(&payload), &timeline, None, options) {
        Ok(outcome) => outcome,
        Err(e) => return Ok(error(e.to_string())),
    };
    if let Some(coverage) = session.coverage.as_mut() {
        coverage
            .of(rules, &payload, console)?
            .record(&outcome.lines);
    }
    let page = Page {
        draw: session.draw,
        name: &name,
        table: &table,
        payload: &payload,
        logs: &outcome.logs,
    };
    Ok(Some(judge(&expectations, &outcome.lines, &page)))
}

/// What a failed test's page is drawn from.
struct Page<'a> {
    /// `--html`: draw it.
    draw: bool,
    name: &'a str,
    table: &'a toml::Table,
    payload: &'a Payload,
    /// The engine's log lines, for the envelope's refusals.
    logs: &'a [(u64, ruled_engine::LogLine)],
}

/// The test's result: its expectations against the simulation's lines.
fn judge(expectations: &[Expectation], lines: &[Line], page: &Page<'_>) -> TestResult {
    let json: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(&line.to_json()).unwrap_or(Value::Null))
        .collect();
    let unmet = first_unmet(expectations, &json);
    let drawn = match &unmet {
        Some(unmet) if page.draw => Some(failure_page(
            page.name,
            page.table,
            page.payload,
            page.logs,
            lines,
            unmet,
        )),
        _ => None,
    };
    let outcome = match unmet {
        None => Outcome::Pass,
        Some(Unmet {
            expectation,
            problem,
            marked,
        }) => Outcome::Fail {
            expectation: expectation.to_string(),
            problem,
            output: lines.iter().map(Line::to_text).collect(),
            marked,
        },
    };
    TestResult {
        file: page.name.to_string(),
        expectations: expectations.len(),
        outcome,
        page: drawn,
    }
}

/// An expectation the output does not meet: what was wrong, and the lines
/// to point at.
struct Unmet<'a> {
    expectation: &'a Expectation,
    problem: String,
    marked: Vec<usize>,
}

/// The first expectation the output does not meet, if any.
fn first_unmet<'a>(expectations: &'a [Expectation], json: &[Value]) -> Option<Unmet<'a>> {
    let index = expect::LineIndex::new(json);
    for expectation in expectations {
        let selected = index.select(expectation);
        let Some(problem) = expectation.judge(selected.len()) else {
            continue;
        };
        // Point at what was found; when nothing was, at the near misses:
        // the right kind and fields at another time.
        let marked = if selected.is_empty() {
            (0..json.len())
                .filter(|&i| expectation.selects_fields(&json[i]))
                .collect()
        } else {
            selected
        };
        return Some(Unmet {
            expectation,
            problem,
            marked,
        });
    }
    None
}

/// A failed test's page (docs/rulec.md#rulec-test): its timeline picture,
/// the expectation's rule and time drawn, the lines in question ringed.
fn failure_page(
    file: &str,
    timeline: &toml::Table,
    payload: &Payload,
    logs: &[(u64, ruled_engine::LogLine)],
    lines: &[Line],
    unmet: &Unmet<'_>,
) -> String {
    let expectation = unmet.expectation;
    let rule = expectation
        .fields
        .iter()
        .find(|(key, _)| key == "rule")
        .and_then(|(_, value)| value.as_str().map(str::to_string));
    let window = match expectation.when {
        When::Any => None,
        When::At(at) => Some((at, at)),
        When::Between(from, to) => Some((from, to)),
    };
    html::render(&html::Page {
        title: format!("rulec test {file}"),
        lines,
        bundles: vec![payload],
        timeline,
        logs,
        failure: Some(html::Failure {
            file: file.to_string(),
            expectation: expectation.to_string(),
            problem: unmet.problem.clone(),
            marked: unmet.marked.clone(),
            rule,
            window,
        }),
    })
}

/// `--html DIR`: each failed test's page as `DIR/<test file name>.html`.
fn write_pages(dir: &Path, results: &[TestResult], console: &mut Console<'_>) -> io::Result<Exit> {
    if let Err(error) = std::fs::create_dir_all(dir) {
        writeln!(console.err, "error: cannot make {}: {error}", dir.display())?;
        return Ok(Exit::Usage);
    }
    let mut names = std::collections::HashSet::new();
    for result in results {
        let Some(page) = &result.page else {
            continue;
        };
        let stem = Path::new(&result.file)
            .file_stem()
            .map_or_else(|| "test".into(), |stem| stem.to_string_lossy());
        // Two failing tests of one name (from two folders) get two pages.
        let mut name = format!("{stem}.html");
        for n in 2.. {
            if names.insert(name.clone()) {
                break;
            }
            name = format!("{stem}-{n}.html");
        }
        let path = dir.join(&name);
        if let Err(error) = std::fs::write(&path, page) {
            writeln!(
                console.err,
                "error: cannot write {}: {error}",
                path.display()
            )?;
            return Ok(Exit::Usage);
        }
        writeln!(console.err, "wrote {}", path.display())?;
    }
    Ok(Exit::Success)
}

/// Runs `rulec test`.
pub fn run(args: &TestArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let plan = match plan(args) {
        Ok(plan) => plan,
        Err(message) => {
            writeln!(console.err, "error: {message}")?;
            return Ok(Exit::Usage);
        }
    };
    let mut results = Vec::new();
    let mut session = Session {
        profile: &args.profile.profile,
        loaded: Loaded::new(),
        draw: args.html.is_some(),
        coverage: (args.coverage || args.coverage_out.is_some()).then(coverage::Coverages::default),
    };
    for (file, rules) in &plan {
        match run_file(file, rules, &mut session, console)? {
            Some(result) => results.push(result),
            None => writeln!(
                console.err,
                "note: {} has no [[expect]] or [[expect-none]]: not a test",
                file.display()
            )?,
        }
    }
    for result in &results {
        match args.format {
            TestFormat::Text => print_text(result, console)?,
            TestFormat::Json => writeln!(console.out, "{}", to_json(result))?,
        }
    }
    if let Some(coverages) = session.coverage.as_ref().filter(|_| args.coverage) {
        for set in &coverages.sets {
            match args.format {
                TestFormat::Text => write!(console.out, "{}", coverage::text(set))?,
                TestFormat::Json => writeln!(console.out, "{}", coverage::json(set))?,
            }
        }
    }
    let failed = results
        .iter()
        .filter(|r| r.outcome != Outcome::Pass)
        .count();
    writeln!(
        console.err,
        "{} passed, {failed} failed",
        results.len() - failed
    )?;
    if let Some(path) = &args.junit {
        if let Err(error) = std::fs::write(path, junit::render(&results)) {
            writeln!(
                console.err,
                "error: cannot write {}: {error}",
                path.display()
            )?;
            return Ok(Exit::Usage);
        }
    }
    if let (Some(path), Some(coverages)) = (&args.coverage_out, &session.coverage) {
        if let Err(error) = std::fs::write(path, coverage::lcov(&coverages.sets)) {
            writeln!(
                console.err,
                "error: cannot write {}: {error}",
                path.display()
            )?;
            return Ok(Exit::Usage);
        }
    }
    if let Some(dir) = &args.html {
        let exit = write_pages(dir, &results, console)?;
        if exit != Exit::Success {
            return Ok(exit);
        }
    }
    if results.is_empty() {
        writeln!(console.err, "error: no tests found")?;
        return Ok(Exit::Failure);
    }
    Ok(if failed > 0 {
        Exit::Failure
    } else {
        Exit::Success
    })
}

/// The failure as people read it: the expectation, what was wrong, and
/// the output with the lines in question marked `>`.
pub fn failure_text(result: &TestResult) -> String {
    match &result.outcome {
        Outcome::Pass => String::new(),
        Outcome::Error { message } => format!("  {message}\n"),
        Outcome::Fail {
            expectation,
            problem,
            output,
            marked,
        } => {
            let mut text = format!("  {expectation}\n  {problem}; the simulation printed:\n");
            for (index, line) in output.iter().enumerate() {
                let mark = if marked.contains(&index) { ">" } else { " " };
                text.push_str(&format!("  {mark} {line}\n"));
            }
            text
        }
    }
}

fn print_text(result: &TestResult, console: &mut Console<'_>) -> io::Result<()> {
    match &result.outcome {
        Outcome::Pass => writeln!(
            console.out,
            "pass  {} ({})",
            result.file,
            plural(result.expectations, "expectation")
        ),
        Outcome::Fail { .. } => {
            writeln!(console.out, "FAIL  {}", result.file)?;
            write!(console.out, "{}", failure_text(result))
        }
        Outcome::Error { .. } => {
            writeln!(console.out, "ERROR {}", result.file)?;
            write!(console.out, "{}", failure_text(result))
        }
    }
}

fn to_json(result: &TestResult) -> Value {
    let mut object = serde_json::json!({
        "file": result.file,
        "expectations": result.expectations,
    });
    let status = match &result.outcome {
        Outcome::Pass => "pass",
        Outcome::Fail {
            expectation,
            problem,
            output,
            marked,
        } => {
            object["expectation"] = Value::from(expectation.as_str());
            object["problem"] = Value::from(problem.as_str());
            object["output"] = Value::from(output.clone());
            object["marked"] = Value::from(marked.clone());
            "fail"
        }
        Outcome::Error { message } => {
            object["problem"] = Value::from(message.as_str());
            "error"
        }
    };
    object["status"] = Value::from(status);
    object
}
