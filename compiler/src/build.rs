//! `rulec build DIR -o FILE` (docs/bundle.md, docs/rulec.md): check the rules, lower every
//! `when` into one constant pool, fingerprint every step, and write the
//! bundle atomically.
//!
//! The bundle is byte-for-byte deterministic: rules in bundle order, state
//! pairs sorted, constants interned in first-use order of that walk, no
//! timestamps and no absolute paths. The written bytes are decoded and
//! verified again before the file is written, so a lowering bug fails the
//! build here rather than the service on the scooter.

use crate::check::{check_and_print, plural, CheckReport, Format, ProfileArgs};
use crate::cli::{Console, Exit};
use crate::diagnostic::{render_text, to_json, Code, Diagnostic, Severity};
use crate::envelope::EnvelopeDecls;
use crate::profile::LoadedProfile;
use crate::validate::{CheckedPart, CheckedRule, CheckedStep};
use crate::when::{lower, ConstPool};
use rulecore::bundle::{Action, Payload, Rule, RuleOptions, Step, Text};
use rulecore::codec::{self, BundleError};
use rulecore::template::Part;
use rulecore_io::bundle_file;
use ruled_engine::mebibytes;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// `rulec build` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  rulec build /etc/rules -o rules.bundle
  rulec build rules/ -o rules.bundle --partial
  rulec build rules/alarm.toml -o alarm.bundle   (one file alone)
  rulec build rules/ -o rules.bundle --format json

Prints the bundle id on stdout and a summary on stderr; with --format json
the id is a JSON line {\"bundle\": ID, \"rules\": N, ...} after the
diagnostics. With --deny-warnings a warning is an error and rejects its rule.
A path that does not exist is an error (a deployed empty bundle would
remove every rule); --allow-empty writes an empty bundle for it instead.
Entries of the directory that are not rule files (sub-folders, other
extensions, *.TOML, *.toml.bak) are listed as notes.
Exit status: 0 written, 1 errors in the rules (nothing written, unless
--partial), 2 usage or I/O error (also a missing path).")]
pub struct BuildArgs {
    /// The rules directory (its `*.toml` files, not recursive), or one rule file.
    pub dir: PathBuf,
    /// Where to write the bundle (atomically: temp file + rename).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// With errors, still write the rules that compiled (and exit 1).
    #[arg(long)]
    pub partial: bool,
    /// Make every warning an error: it rejects its rule (exit 1).
    #[arg(long)]
    pub deny_warnings: bool,
    /// How to print diagnostics.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write an empty bundle when the rules path does not exist (instead
    /// of failing with exit 2).
    #[arg(long)]
    pub allow_empty: bool,
    #[command(flatten)]
    pub profile: ProfileArgs,
}

/// The compiler version written into every bundle.
pub const COMPILER_VERSION: &str = env!("CARGO_PKG_VERSION");

impl CheckReport {
    /// Lowers the rules that survived the check into a bundle payload
    /// (with the report's profile): the last step of a
    /// [`crate::session::Session`].
    pub fn assemble(&self, compiler_version: &str) -> Payload {
        assemble_all(
            &self.rules,
            self.profile.as_deref(),
            &self.envelope,
            compiler_version,
        )
    }

    /// [`Self::assemble`]d, encoded, and verified by decoding the bytes
    /// again: what `rulec build` writes.
    pub fn build(&self) -> Result<Built, BundleError> {
        build_report(self)
    }
}

/// Turns checked rules into a bundle payload: one constant pool for every
/// expression, fingerprints computed against the final pools; a bus
/// profile's programs share the pool. With the rules directory's guards and limits
/// (docs/safety.md) after the profile's: what `rulec build` and `rulec
/// simulate` assemble from a [`crate::check::CheckReport`].
pub fn assemble_all(
    rules: &[CheckedRule],
    profile: Option<&LoadedProfile>,
    rules_envelope: &EnvelopeDecls,
    compiler_version: &str,
) -> Payload {
    let mut envelope = profile
        .map(|profile| profile.decls.envelope.clone())
        .unwrap_or_default();
    envelope.extend(rules_envelope.clone());
    let whens = || {
        rules.iter().flat_map(|rule| {
            rule.when
                .iter()
                .chain(rule.step_whens().map(|(_, _, when)| when))
        })
    };
    // Registering every pair first makes the bundle's list sorted.
    let mut pool = ConstPool::with_state_pairs(
        whens()
            .flat_map(|expr| expr.checked.state_pairs.iter().cloned())
            .chain(profile.into_iter().flat_map(LoadedProfile::state_pairs))
            .chain(envelope.state_pairs()),
    );

    // Rules come file by file: the rules of one file share its name.
    let mut file: Arc<str> = Arc::from("");
    let mut source_of = |name: &str| {
        if *file != *name {
            file = Arc::from(name);
        }
        Arc::clone(&file)
    };
    let rules_out: Vec<Rule> = rules
        .iter()
        .map(|rule| {
            // The rule's `when` first, then its steps, then its finally
            // steps: the order constants are interned in.
            let when = rule
                .when
                .as_ref()
                .map(|e| Box::new(lower(&e.checked, &mut pool)));
            // The key next: constants are interned in the order written
            // to the bundle's rule.
            let per = rule.per.as_ref().map(|e| lower(&e.checked, &mut pool));
            Rule {
                name: rule.name.as_str().into(),
                source: source_of(&rule.source),
                enabled: rule.enabled,
                concurrency: rule.concurrency,
                on: rule.on.as_slice().into(),
                when,
                steps: rule
                    .steps
                    .iter()
                    .map(|s| lower_step(s, &mut pool))
                    .collect(),
                options: RuleOptions {
                    cancel_on: rule.cancel_on.as_slice().into(),
                    cooldown_ns: rule.cooldown_ns,
                    debounce_ns: rule.debounce_ns,
                    hold_ns: rule.hold_ns,
                    repeat: rule.repeat,
                    inputs: Box::default(),
                    finally: rule
                        .finally
                        .iter()
                        .map(|s| lower_step(s, &mut pool))
                        .collect(),
                    protected: rule.protected,
                    trip: rule.trip,
                    per,
                    schedule: rule.schedule.clone(),
                }
                .boxed(),
            }
        })
        .collect();
    // After the rules: `--profile none` leaves their pool as it was.
    let lowered = profile.map(|profile| profile.lower(&mut pool));
    let envelope = crate::envelope::lower(&envelope, &mut pool);
    let (consts, state_pairs) = pool.finish();
    // Fingerprints are computed here, against the final pools.
    let mut payload = Payload::new(compiler_version, rules_out, state_pairs, consts);
    add_inputs(&mut payload, rules);
    payload.profile = lowered;
    payload.envelope = envelope;
    payload
}

/// One checked step in the bundle's form, its `when` lowered into `pool`:
/// steps and finally steps (docs/rules.md#finally) alike.
fn lower_step(step: &CheckedStep, pool: &mut ConstPool) -> Step {
    Step {
        when: step.when.as_ref().map(|e| lower(&e.checked, pool)),
        durable: step.durable,
        ..Step::new(lower_values(step, pool), step.after_ns)
    }
}

/// The step's action with each computed value's expressions lowered into
/// the bundle's pools, in the order [`Action::texts`] gives them.
fn lower_values(step: &CheckedStep, pool: &mut ConstPool) -> Action {
    let mut action = step.action.clone();
    let mut values = step.values.iter();
    for text in action.texts_mut() {
        let Text::Computed(template) = text else {
            continue;
        };
        let Some(checked) = values.next() else {
            break;
        };
        template.parts = checked
            .parts
            .iter()
            .map(|part| match part {
                CheckedPart::Literal(text) => Part::Literal(text.clone()),
                CheckedPart::Expr(expr) => Part::Expr(lower(&expr.checked, pool)),
            })
            .collect();
    }
    action
}

/// Every distinct input once, in order of first declaration, and each
/// rule's indices into them (docs/bundle.md): identical declarations are
/// shared. Part of no fingerprint.
fn add_inputs(payload: &mut Payload, rules: &[CheckedRule]) {
    for (out, rule) in payload.rules.iter_mut().zip(rules) {
        let mut inputs: Vec<u32> = Vec::with_capacity(rule.inputs.len());
        for checked in &rule.inputs {
            let index = match payload.inputs.iter().position(|i| *i == checked.input) {
                Some(index) => index,
                None => {
                    payload.inputs.push(checked.input.clone());
                    payload.inputs.len() - 1
                }
            };
            // At most 64 inputs (checked), so the index fits.
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            if !inputs.contains(&index) {
                inputs.push(index);
            }
        }
        inputs.sort_unstable();
        // Only a rule with inputs needs its options boxed for them.
        if !inputs.is_empty() {
            out.options_mut().inputs = inputs.into();
        }
    }
}

/// A bundle ready to write.
#[derive(Debug, Clone)]
pub struct Built {
    pub bytes: Vec<u8>,
    /// Hex blake3 of the payload.
    pub id: String,
    pub payload: Payload,
}

impl Built {
    /// Rules that run live (the others are replay-only, docs/rules.md#disabled-rules).
    pub fn enabled_rules(&self) -> usize {
        self.payload.rules.iter().filter(|r| r.enabled).count()
    }

    /// Steps over all rules.
    pub fn steps(&self) -> usize {
        self.payload.rules.iter().map(|r| r.steps.len()).sum()
    }
}

/// Assembles, encodes, and verifies by decoding the bytes again, from a
/// check's report: the rules directory's guards and
/// limits too (docs/safety.md).
pub fn build_report(report: &crate::check::CheckReport) -> Result<Built, BundleError> {
    let payload = assemble_all(
        &report.rules,
        report.profile.as_deref(),
        &report.envelope,
        COMPILER_VERSION,
    );
    let bytes = codec::encode(&payload)?;
    let id = codec::decode(&bytes)?.id;
    Ok(Built { bytes, id, payload })
}

/// `3 rules (2 enabled, 1 replay-only), 5 steps, 2 state pairs, 812 bytes`.
pub fn summary(built: &Built) -> String {
    let rules = &built.payload.rules;
    let enabled = built.enabled_rules();
    let mut text = plural(rules.len(), "rule");
    if enabled != rules.len() {
        text.push_str(&format!(
            " ({enabled} enabled, {} replay-only)",
            rules.len() - enabled
        ));
    }
    format!(
        "{text}, {}, {}, {} bytes",
        plural(built.steps(), "step"),
        plural(built.payload.state_pairs.len(), "state pair"),
        built.bytes.len()
    )
}

/// The heap a bundle may take in `ruled` before a warning (docs/bundle.md#building).
pub use ruled_engine::MEMORY_BUDGET;

/// Prints the estimated heap of the bundle in `ruled`.
fn report_memory(estimate: usize, console: &mut Console<'_>) -> io::Result<()> {
    writeln!(
        console.err,
        "memory: about {} once loaded in ruled (budget {})",
        mebibytes(estimate),
        mebibytes(MEMORY_BUDGET)
    )
}

/// `rulec::memory-budget` when the estimate is over [`MEMORY_BUDGET`]: a
/// warning, an error with `--deny-warnings`.
fn memory_diagnostic(estimate: usize, deny_warnings: bool) -> Option<Diagnostic> {
    if estimate <= MEMORY_BUDGET {
        return None;
    }
    let message = format!(
        "the bundle needs about {} in ruled, over the budget of {}",
        mebibytes(estimate),
        mebibytes(MEMORY_BUDGET)
    );
    let diagnostic = if deny_warnings {
        Diagnostic::error(Code::MemoryBudget, message)
    } else {
        Diagnostic::warning(Code::MemoryBudget, message)
    };
    Some(diagnostic.with_help(
        "with the service's 48 MB cap, runs and queued jobs may not fit; fewer or smaller rules help",
    ))
}

/// Prints a diagnostic of the whole bundle (no file) in `format`.
fn print_bundle_diagnostic(
    diagnostic: &Diagnostic,
    format: Format,
    console: &mut Console<'_>,
) -> io::Result<()> {
    match format {
        Format::Text => console.err.write_all(
            render_text(std::slice::from_ref(diagnostic), &[], console.style).as_bytes(),
        ),
        Format::Json => writeln!(console.out, "{}", to_json(diagnostic, &[])),
    }
}

/// Runs `rulec build`.
pub fn run(args: &BuildArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    if let Some(exit) = refuse_stdout(args, console)? {
        return Ok(exit);
    }
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
    if let Some(exit) = refuse_missing_dir(args, &report, console)? {
        return Ok(exit);
    }
    let failed = report.failed(args.deny_warnings);
    let check_summary = report.summary();
    if let Some(exit) = refuse_failed(args, &report, failed, &check_summary, console)? {
        return Ok(exit);
    }
    let built = match report.build() {
        Ok(built) => built,
        Err(error) => {
            // The compiler produced a bundle its own loader refuses: a bug.
            writeln!(
                console.err,
                "error: internal: the compiled bundle does not verify: {error}"
            )?;
            return Ok(Exit::Failure);
        }
    };
    let estimate = ruled_engine::estimated_heap(&built.payload);
    if let Some(over) = memory_diagnostic(estimate, args.deny_warnings) {
        print_bundle_diagnostic(&over, args.format, console)?;
        if over.severity == Severity::Error {
            report_memory(estimate, console)?;
            writeln!(
                console.err,
                "{check_summary}; the bundle is over the memory budget: not written (--deny-warnings)"
            )?;
            return Ok(Exit::Failure);
        }
    }
    if let Some(exit) = write_bundle(args, &built, console)? {
        return Ok(exit);
    }
    print_id(args, &built, estimate, failed, console)?;
    report_memory(estimate, console)?;
    let partial = if failed { " (partial)" } else { "" };
    writeln!(
        console.err,
        "{check_summary}; wrote {}{partial}: {}",
        args.output.display(),
        summary(&built)
    )?;
    Ok(if failed { Exit::Failure } else { Exit::Success })
}

/// `-o -` reads as "to stdout" to most users, but stdout carries the
/// bundle id (and JSON lines): refuse instead of writing a file named `-`.
fn refuse_stdout(args: &BuildArgs, console: &mut Console<'_>) -> io::Result<Option<Exit>> {
    if args.output.as_os_str() != "-" {
        return Ok(None);
    }
    writeln!(
        console.err,
        "error: the bundle is written to a file, not to stdout (which gets its id): \
         give a file name, e.g. `-o rules.bundle`"
    )?;
    Ok(Some(Exit::Usage))
}

/// A rules path that does not exist: refused unless `--allow-empty`, then
/// noted.
fn refuse_missing_dir(
    args: &BuildArgs,
    report: &CheckReport,
    console: &mut Console<'_>,
) -> io::Result<Option<Exit>> {
    if !report.missing_dir {
        return Ok(None);
    }
    if !args.allow_empty {
        // A misspelt path must not become a bundle that, deployed, removes
        // every rule (docs/rulec.md#rulec-build).
        writeln!(
            console.err,
            "error: {} does not exist: nothing written (use --allow-empty to write a bundle \
             with no rules)",
            args.dir.display()
        )?;
        return Ok(Some(Exit::Usage));
    }
    writeln!(
        console.err,
        "note: {} does not exist: the bundle has no rules (--allow-empty)",
        args.dir.display()
    )?;
    Ok(None)
}

/// Errors in the rules (without `--partial`) or in the profile: nothing
/// is written.
fn refuse_failed(
    args: &BuildArgs,
    report: &CheckReport,
    failed: bool,
    check_summary: &str,
    console: &mut Console<'_>,
) -> io::Result<Option<Exit>> {
    if failed && !args.partial {
        writeln!(
            console.err,
            "{check_summary}; nothing written (use --partial to write the rules that compiled)"
        )?;
        return Ok(Some(Exit::Failure));
    }
    // A broken guard or limit fails the build even with --partial: the
    // bundle would carry a weaker envelope than the files declare
    // (docs/safety.md#adding-to-it).
    if !report.envelope_broken.is_empty() {
        writeln!(
            console.err,
            "{check_summary}; nothing written: a guard or limit has errors (in {}), and a \
             bundle without it would weaken the envelope",
            report.envelope_broken.join(", ")
        )?;
        return Ok(Some(Exit::Failure));
    }
    // A profile with errors fails the build even with --partial: a bundle
    // must not derive events from a half-read profile.
    if report.profile.as_ref().is_some_and(|p| p.errors() > 0) {
        writeln!(
            console.err,
            "{check_summary}; nothing written: the profile has errors"
        )?;
        return Ok(Some(Exit::Failure));
    }
    Ok(None)
}

/// Writes the bundle atomically to `-o`; on failure, says why (exit 2).
fn write_bundle(
    args: &BuildArgs,
    built: &Built,
    console: &mut Console<'_>,
) -> io::Result<Option<Exit>> {
    let Err(error) = bundle_file::write_atomic(&args.output, &built.bytes) else {
        return Ok(None);
    };
    // Name the file the user asked for, not the temporary file next to
    // it that the atomic write failed on (a random name, never seen).
    let reason = match &error {
        BundleError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    writeln!(
        console.err,
        "error: cannot write the bundle {}: {reason}",
        args.output.display()
    )?;
    Ok(Some(Exit::Usage))
}

/// The bundle id on stdout: a bare line, or with `--format json` one JSON
/// object.
fn print_id(
    args: &BuildArgs,
    built: &Built,
    estimate: usize,
    failed: bool,
    console: &mut Console<'_>,
) -> io::Result<()> {
    match args.format {
        Format::Text => writeln!(console.out, "{}", built.id)?,
        // stdout is JSON lines in this mode: the id is one more object,
        // after the diagnostics, never a bare word among them.
        Format::Json => {
            let line = serde_json::json!({
                "bundle": built.id,
                "output": args.output.display().to_string(),
                "rules": built.payload.rules.len(),
                "enabled": built.enabled_rules(),
                "steps": built.steps(),
                "state_pairs": built.payload.state_pairs.len(),
                "bytes": built.bytes.len(),
                "memory_estimate": estimate,
                "partial": failed,
            });
            writeln!(console.out, "{line}")?;
        }
    }
    Ok(())
}
