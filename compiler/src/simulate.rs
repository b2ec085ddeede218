//! `rulec simulate DIR|BUNDLE --timeline FILE` (docs/rulec.md, docs/simulation.md): runs the
//! runtime's own engine (`ruled_engine::sim`) on a virtual clock and prints what
//! the vehicle would see, one line per thing that happened; `--html FILE`
//! also draws it ([`html`]).

pub mod html;

use crate::build::COMPILER_VERSION;
use crate::check::{check_and_print, Format, ProfileArgs};
use crate::cli::{Console, Exit};
use crate::diagnostic::{render_text_with, Severity, Sources};
use crate::load::SourceFile;
use crate::profile::ProfileChoice;
use crate::timeline::Known;
use rulecore::bundle::Payload;
use rulecore::codec::BundleError;
use rulecore_io::bundle_file;
use rulecore_io::input_file::read_bounded;
use ruled_engine::sim::{parse, simulate_reloading, trace_json, Options, Timeline, TimelineError};
use ruled_engine::TimeStyle;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `rulec simulate` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec simulate rules/ --timeline fixtures/timelines/hazards.toml
  rulec simulate rules.bundle --timeline t.toml --bundle-after-restart new.bundle --format json
  rulec simulate rules/ --timeline t.toml --explain
  rulec simulate rules/ --timeline t.toml --trace
  rulec simulate rules/ --timeline t.toml --explain --html timeline.html

A timeline lists entries at virtual times since the start; actions are
recorded, never performed:

  [[event]]                 # topic; optional id, src, from, to, data
  at = \"0s\"
  topic = \"alarm.triggered\"
  [[restart]]               # down defaults to \"0s\"
  at = \"10s\"
  down = \"5s\"

Also [[state]] (hash, field, value), [[message]] (channel, payload: a
raw message for a channel input), [[fail]] (rule, step, until, refused-whole),
[[clock]] (jump), [[reload]] (bundle: a bundle file or rules directory,
relative to the timeline, deployed and reloaded at `at`), and the settings end, replay-window, workers, queue,
action-time, start (the wall clock at 0s, RFC 3339) and timezone (the local zone of
`at` and `every` schedules). The format and every output line are described in
docs/simulation.md. A `when` that fails to evaluate prints an `eval-error`
line; the last line, `end`, lists the runs still waiting and the rules
still holding a debounced event. `--trace` then prints each rule's traces:
its last runs step by step, and its last non-fire. `--html FILE` also
writes the output as a picture: one self-contained HTML page (a lane for
the bus and one per rule; point at a mark for its line; zoom and pan).

Exit status: 0 simulated, 1 bad rules, bundle or timeline, 2 usage or I/O
error.")]
pub struct SimulateArgs {
    /// A rules directory or one rule file (compiled in memory), or a bundle file.
    pub input: PathBuf,
    /// The timeline TOML file.
    #[arg(long, value_name = "FILE")]
    pub timeline: PathBuf,
    /// A bundle (or rules directory) that replaces the rules at every
    /// `[[restart]]`.
    #[arg(long, value_name = "FILE")]
    pub bundle_after_restart: Option<PathBuf>,
    /// `text` (one line each) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = SimFormat::Text)]
    pub format: SimFormat,
    /// Add a `non-fire` line for every trigger that did not start a run,
    /// with the reason (when-false, when-error, debounce-held,
    /// debounce-reset, hold-pending, hold-fired, cooldown, dropped, queued,
    /// refused, rule-disabled).
    #[arg(long)]
    pub explain: bool,
    /// After the `end` line, print every rule's traces as `ruled` keeps
    /// them: its last 5 runs (trigger event, each step's wait, `when`,
    /// submit and end, the run's end reason) and its last non-fire.
    #[arg(long)]
    pub trace: bool,
    /// Also write the output lines as a picture: one self-contained HTML
    /// page (no network; docs/simulation.md, "The timeline picture");
    /// stdout is unchanged.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub profile: ProfileArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimFormat {
    Text,
    Json,
}

/// The largest timeline file read (docs/simulation.md): a timeline of a
/// hundred thousand lines is a few megabytes.
pub const MAX_TIMELINE_LEN: u64 = 16 << 20;

/// A timeline file's text, read through the bounded reader every input
/// file goes through (docs/rulec.md#input-files); `Err` says why not.
pub fn read_timeline(path: &Path) -> Result<String, String> {
    read_bounded(path, MAX_TIMELINE_LEN)
        .map_err(|error| error.to_string())
        .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string()))
}

/// Loads rules from a directory or one `*.toml` rule file (compiled in
/// memory, as `rulec check` reads them), or from a bundle file.
/// `Err(exit)` after the problem was printed.
pub(crate) fn load_rules(
    path: &Path,
    profile: &ProfileChoice,
    console: &mut Console<'_>,
) -> io::Result<Result<Payload, Exit>> {
    Ok(load_rules_known(path, profile, console)?.map(|(payload, _)| payload))
}

/// The names of a catalogue's topics; `None`: no catalogue.
pub(crate) type CatalogueNames = Option<Vec<String>>;

/// [`load_rules`], with the names of the catalogue's topics the rules were
/// checked against (`None` for a bundle file, or without a catalogue):
/// what a timeline's topics are checked against.
pub(crate) fn load_rules_known(
    path: &Path,
    profile: &ProfileChoice,
    console: &mut Console<'_>,
) -> io::Result<Result<(Payload, CatalogueNames), Exit>> {
    let rule_file = path.extension().is_some_and(|ext| ext == "toml");
    if path.is_dir() || rule_file {
        let report = match check_and_print(path, false, Format::Text, profile, console)? {
            Ok(report) => report,
            Err(exit) => return Ok(Err(exit)),
        };
        if report.failed(false) {
            writeln!(
                console.err,
                "{}: {}; not simulated",
                path.display(),
                report.summary()
            )?;
            return Ok(Err(Exit::Failure));
        }
        let topics: Vec<String> = report.topics.iter().map(|t| t.name.clone()).collect();
        let payload = report.assemble(COMPILER_VERSION);
        return Ok(Ok((payload, (!topics.is_empty()).then_some(topics))));
    }
    match bundle_file::read(path) {
        Ok(bundle) => Ok(Ok((bundle.payload, None))),
        Err(error @ (BundleError::Io { .. } | BundleError::NotAFile { .. })) => {
            writeln!(console.err, "error: {error}")?;
            Ok(Err(Exit::Usage))
        }
        Err(error) => {
            writeln!(console.err, "error: {}: {error}", path.display())?;
            Ok(Err(Exit::Failure))
        }
    }
}

/// Prints every problem of the timeline or test file `path`
/// ([`crate::timeline::diagnostics`]) as rule files' are, in file order;
/// `true` when one is an error.
pub(crate) fn print_timeline_problems(
    path: &Path,
    text: &str,
    known: Option<&Known>,
    console: &mut Console<'_>,
) -> io::Result<bool> {
    let name = path.display().to_string();
    let mut diagnostics = crate::timeline::diagnostics(&name, text, known);
    diagnostics.sort_by_key(|d| d.label.as_ref().map_or(0, |label| label.span.start));
    let files = [SourceFile {
        name,
        text: text.to_string(),
    }];
    let rendered = render_text_with(&diagnostics, &Sources::new(&files), console.style);
    console.err.write_all(rendered.as_bytes())?;
    Ok(diagnostics.iter().any(|d| d.severity == Severity::Error))
}

/// Runs `rulec simulate`.
pub fn run(args: &SimulateArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let (payload, topics) = match load_rules_known(&args.input, &args.profile.profile, console)? {
        Ok(loaded) => loaded,
        Err(exit) => return Ok(exit),
    };
    let after = match &args.bundle_after_restart {
        Some(path) => match load_rules(path, &args.profile.profile, console)? {
            Ok(payload) => Some(Arc::new(payload)),
            Err(exit) => return Ok(exit),
        },
        None => None,
    };
    let text = match read_timeline(&args.timeline) {
        Ok(text) => text,
        Err(reason) => {
            writeln!(
                console.err,
                "error: cannot read the timeline {}: {reason}",
                args.timeline.display()
            )?;
            return Ok(Exit::Usage);
        }
    };
    let options = Options {
        explain: args.explain,
        trace: args.trace,
    };
    let Ok(timeline) = parse(&text).map(crate::timeline::with_zone) else {
        print_timeline_problems(&args.timeline, &text, None, console)?;
        return Ok(Exit::Failure);
    };
    let reloads = match load_reloads(&args.timeline, &timeline, &args.profile.profile, console)? {
        Ok(reloads) => reloads,
        Err(exit) => return Ok(exit),
    };
    let mut known = Known {
        topics,
        ..Known::default()
    };
    for bundle in std::iter::once(&payload).chain(after.as_deref()) {
        known.add_rules(bundle);
    }
    for bundle in &reloads {
        known.add_rules(bundle);
    }
    if print_timeline_problems(&args.timeline, &text, Some(&known), console)? {
        return Ok(Exit::Failure);
    }
    let payload = Arc::new(payload);
    let mut bundles = vec![Arc::clone(&payload)];
    bundles.extend(after.iter().cloned());
    bundles.extend(reloads.iter().cloned());
    let outcome = match simulate_reloading(payload, &timeline, after, reloads, options) {
        Ok(outcome) => outcome,
        Err(error) => {
            report_timeline_error(&args.timeline, &error, console)?;
            return Ok(Exit::Failure);
        }
    };
    for line in &outcome.lines {
        match args.format {
            SimFormat::Text => writeln!(console.out, "{}", line.to_text())?,
            SimFormat::Json => writeln!(console.out, "{}", line.to_json())?,
        }
    }
    let end_ms = outcome.lines.last().map_or(0, |line| line.at_ms);
    for trace in &outcome.traces {
        match args.format {
            SimFormat::Text => write!(console.out, "\n{}", trace.to_text(TimeStyle::Millis))?,
            SimFormat::Json => writeln!(console.out, "{}", trace_json(end_ms, trace)?)?,
        }
    }
    // What the service would log (refusals, replay removals), for people: on stderr, never mixed into the data.
    for (at_ms, log) in &outcome.logs {
        writeln!(console.err, "{at_ms} ms: {log}")?;
    }
    match &args.html {
        Some(path) => write_page(path, args, &text, &bundles, &outcome, console),
        None => Ok(Exit::Success),
    }
}

/// `--html FILE`: the page of this simulation (docs/simulation.md#the-timeline-picture).
fn write_page(
    path: &Path,
    args: &SimulateArgs,
    timeline_text: &str,
    bundles: &[Arc<Payload>],
    outcome: &ruled_engine::sim::Outcome,
    console: &mut Console<'_>,
) -> io::Result<Exit> {
    let table: toml::Table = match toml::from_str(timeline_text) {
        Ok(table) => table,
        Err(error) => {
            writeln!(console.err, "error: {}: {error}", args.timeline.display())?;
            return Ok(Exit::Failure);
        }
    };
    let mut title = format!(
        "rulec simulate {} --timeline {}",
        args.input.display(),
        args.timeline.display()
    );
    if args.explain {
        title.push_str(" --explain");
    }
    let page = html::Page {
        title,
        lines: &outcome.lines,
        bundles: bundles.iter().map(|payload| &**payload).collect(),
        timeline: &table,
        failure: None,
        logs: &outcome.logs,
    };
    if let Err(error) = std::fs::write(path, html::render(&page)) {
        writeln!(
            console.err,
            "error: cannot write {}: {error}",
            path.display()
        )?;
        return Ok(Exit::Usage);
    }
    writeln!(
        console.err,
        "wrote {} ({} lines drawn)",
        path.display(),
        outcome.lines.len()
    )?;
    Ok(Exit::Success)
}

/// The bundle of every `[[reload]]` (docs/simulation.md#reload), in file
/// order: a bundle file, a rules directory or one rule file, relative to
/// the timeline's directory, loaded as the simulated rules are.
fn load_reloads(
    timeline_path: &Path,
    timeline: &Timeline,
    profile: &ProfileChoice,
    console: &mut Console<'_>,
) -> io::Result<Result<Vec<Arc<Payload>>, Exit>> {
    let base = timeline_path.parent().unwrap_or(Path::new(""));
    let mut reloads = Vec::with_capacity(timeline.reload.len());
    for (index, entry) in timeline.reload.iter().enumerate() {
        let path = base.join(&entry.bundle);
        match load_rules(&path, profile, console)? {
            Ok(payload) => reloads.push(Arc::new(payload)),
            Err(exit) => {
                writeln!(
                    console.err,
                    "error: {}: [[reload]] #{}: cannot load `bundle` = {:?}",
                    timeline_path.display(),
                    index + 1,
                    entry.bundle
                )?;
                return Ok(Err(exit));
            }
        }
    }
    Ok(Ok(reloads))
}

/// A timeline problem: the file and entry, then how to fix it.
fn report_timeline_error(
    path: &Path,
    error: &TimelineError,
    console: &mut Console<'_>,
) -> io::Result<()> {
    writeln!(console.err, "error: {}: {error}", path.display())?;
    if let Some(help) = error.help() {
        writeln!(console.err, "  help: {help}")?;
    }
    Ok(())
}
