//! `ruled ctl`'s text output (docs/operating.md#ruled-ctl): each method's
//! reply, read through its type ([`super::protocol`]), laid out for people.
//! `--format json` prints the reply as it came. A method without a layout
//! here, or a reply its type does not read, is printed as indented JSON.

use super::protocol::{
    AddReply, CoveredStep, EmitReply, GuardProbe, GuardsReply, Hold, LastRebuild, ListReply,
    PendingReply, ReloadReply, RuleLine, RunLine, SetEnabledReply, ShowReply, StatusReply,
    TestReply, TraceReply, Verdict, When,
};
use ruled_engine::TimeStyle;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt::Write;

/// The reply of `method` as text.
pub fn text(method: &str, reply: &Value) -> String {
    let laid_out = match method {
        "v1.status" => layout(reply, status),
        "v1.list" => layout(reply, list),
        "v1.show" => layout(reply, show),
        "v1.test" => layout(reply, test),
        "v1.guards" => layout(reply, guards),
        "v1.pending" => layout(reply, pending),
        "v1.set-enabled" => layout(reply, set_enabled),
        "v1.trace" => layout(reply, trace),
        "v1.reload" => layout(reply, reload),
        "v1.add" => layout(reply, add),
        "v1.emit" => layout(reply, emit),
        _ => None,
    };
    laid_out.unwrap_or_else(|| format!("{}\n", pretty(reply)))
}

/// `reply` read as `T` and laid out by `write`; `None` when it is not a `T`.
fn layout<T: DeserializeOwned>(
    reply: &Value,
    write: fn(&mut String, &T) -> std::fmt::Result,
) -> Option<String> {
    let typed = T::deserialize(reply).ok()?;
    let mut out = String::new();
    write(&mut out, &typed).ok()?;
    Some(out)
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// A string as a person reads it: its control characters and line breaks
/// escaped (docs/operating.md#trust).
fn plain(text: &str) -> String {
    super::escape::field(text)
}

/// An optional string, `-` when absent.
fn plain_or_dash(text: Option<&str>) -> String {
    text.map_or_else(|| "-".to_string(), plain)
}

/// An optional value, `-` when absent.
fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |value| value.to_string())
}

/// A Unix-ms instant as a person reads it: the number, and how far from
/// now on this machine's clock (`ruled ctl` runs beside `ruled`); `-` for
/// none.
fn instant(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return "-".to_string();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    let delta = ms.saturating_sub(now);
    let seconds = format!("{:.1}s", delta.unsigned_abs() as f64 / 1000.0);
    if delta >= 0 {
        format!("{ms} (in {seconds})")
    } else {
        format!("{ms} ({seconds} ago)")
    }
}

fn status(out: &mut String, reply: &StatusReply) -> std::fmt::Result {
    writeln!(out, "ruled {}  pid {}", plain(&reply.version), reply.pid)?;
    writeln!(out, "bundle     {}", plain(&reply.bundle))?;
    writeln!(out, "revision   {}", plain(&reply.revision))?;
    writeln!(
        out,
        "rebuild    {}",
        last_rebuild(reply.last_rebuild.as_ref())
    )?;
    writeln!(out, "namespace  {}", plain(&reply.namespace))?;
    writeln!(out, "uptime     {}s", reply.uptime_ms / 1000)?;
    writeln!(
        out,
        "workers    {} busy of {}",
        reply.busy_workers, reply.workers
    )?;
    writeln!(
        out,
        "queue      {} of {}",
        reply.queue_depth, reply.queue_capacity
    )?;
    writeln!(out, "rules      {} in the bundle", reply.rules.total)?;
    match &reply.profile {
        Some(profile) => writeln!(
            out,
            "profile    {} {}",
            plain(&profile.name),
            plain(&profile.digest)
        )?,
        None => writeln!(out, "profile    none")?,
    }
    let bus = &reply.bus;
    writeln!(
        out,
        "bus        {}, sources {}: {} hashes watched, {} polls, {} owned topics",
        plain(&bus.mode),
        plain(&bus.sources),
        bus.watched_hashes,
        bus.polls,
        bus.owned_topics
    )?;
    for (name, value) in &reply.counters {
        writeln!(out, "  {name:<12} {}", plain(value))?;
    }
    if reply.replay_held {
        writeln!(
            out,
            "replay     held: the wall clock is earlier than the pending file's write time"
        )?;
    }
    for schedule in &reply.schedules {
        writeln!(
            out,
            "schedule   {} {} {} ({}): next {}",
            plain(&schedule.rule),
            plain(&schedule.topic),
            plain(&schedule.at),
            plain(&schedule.timezone),
            instant(Some(schedule.next_fire_ms))
        )?;
    }
    Ok(())
}

/// `v1.status`'s `last-rebuild` in words (docs/operating.md#the-last-rebuild).
fn last_rebuild(last: Option<&LastRebuild>) -> String {
    let record = match last {
        None => return "none recorded".to_string(),
        Some(LastRebuild::Unreadable { unreadable }) => return format!("not read: {unreadable}"),
        Some(LastRebuild::Recorded(record)) => record,
    };
    let at = TimeStyle::Utc.show(record.at_ms);
    if record.ok {
        format!(
            "last rebuild ok at {at}: bundle {}, {} rules",
            plain_or_dash(record.bundle.as_deref()),
            or_dash(record.rules)
        )
    } else {
        format!(
            "last rebuild failed at {at}: {}",
            plain_or_dash(record.first_error.as_deref())
        )
    }
}

/// `on` or `off`.
fn word(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

fn list(out: &mut String, reply: &ListReply) -> std::fmt::Result {
    writeln!(
        out,
        "{:<28} {:<4} {:<6} {:<9} {:>4} {:>4} {:>6} {:>6}  LAST FIRE (unix ms)",
        "RULE", "ON", "BUNDLE", "OVERRIDE", "LIVE", "WAIT", "RUNS", "ERRORS"
    )?;
    for rule in &reply.rules {
        writeln!(
            out,
            "{:<28} {:<4} {:<6} {:<9} {:>4} {:>4} {:>6} {:>6}  {}",
            plain(&rule.name),
            // ON is the result: the bundle's `enabled` unless overridden.
            word(rule.enabled),
            word(rule.bundle_enabled),
            rule.override_state
                .as_deref()
                .map_or_else(|| "none".to_string(), plain),
            rule.live_runs,
            rule.waiting_steps,
            rule.runs,
            rule.errors,
            instant(rule.last_fire_ms),
        )?;
    }
    writeln!(
        out,
        "{} of {} rules shown from {}",
        reply.rules.len(),
        reply.total,
        reply.offset
    )?;
    for orphan in &reply.overrides_without_rule {
        writeln!(
            out,
            "override `{}` = {} names no rule of this bundle (kept)",
            plain(&orphan.name),
            plain(&orphan.state)
        )?;
    }
    Ok(())
}

fn show(out: &mut String, reply: &ShowReply) -> std::fmt::Result {
    let state: &RuleLine = &reply.state;
    // Many lines: their control characters are escaped where all output
    // is (`client::run`).
    write!(out, "{}", reply.text)?;
    writeln!(
        out,
        "now {} (override: {})",
        word(state.enabled),
        plain_or_dash(state.override_state.as_deref())
    )?;
    match &reply.run {
        None => writeln!(out, "no live run")?,
        Some(run) => writeln!(out, "live run {}", run_words(run))?,
    }
    keys_lines(out, reply)?;
    hold_line(out, state.hold.as_ref())?;
    for covered in &reply.envelope {
        covered_line(out, covered)?;
    }
    writeln!(
        out,
        "runs {}  errors {}  last fire {}",
        state.runs,
        state.errors,
        instant(state.last_fire_ms)
    )
}

/// A live run in words: `show#0-1  step 1  pass 0  waiting  due ...`.
fn run_words(run: &RunLine) -> String {
    format!(
        "{}  {} {}  pass {}  {}  due {}",
        plain(&run.id),
        step_word(run),
        run.step,
        run.pass,
        run.state.word(),
        instant(run.due)
    )
}

/// A keyed rule's keys with runs (docs/rules.md#keyed-runs), when more
/// than the one `live run` shows.
fn keys_lines(out: &mut String, reply: &ShowReply) -> std::fmt::Result {
    if reply.keys_with_runs < 2 {
        return Ok(());
    }
    writeln!(out, "keys with a live run: {}", reply.keys_with_runs)?;
    for key in &reply.keys {
        writeln!(out, "  key {:?}  run {}", key.key, run_words(&key.run))?;
    }
    let more = reply.keys_with_runs.saturating_sub(reply.keys.len());
    if more > 0 {
        writeln!(out, "  and {more} more")?;
    }
    Ok(())
}

/// `step 0: guarded by hardware-parked; limited by handlebar`.
fn covered_line(out: &mut String, covered: &CoveredStep) -> std::fmt::Result {
    let names = |names: &[String]| {
        names
            .iter()
            .map(|name| plain(name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !covered.guards.is_empty() {
        parts.push(format!("guarded by {}", names(&covered.guards)));
    }
    if !covered.limits.is_empty() {
        parts.push(format!("limited by {}", names(&covered.limits)));
    }
    let finally = if covered.finally { "finally " } else { "" };
    writeln!(out, "{finally}step {}: {}", covered.step, parts.join("; "))
}

/// Milliseconds as a Go duration (`10s`, `1m0s`), as limits are written.
fn go_duration_ms(ms: u64) -> String {
    let ns = i64::try_from(ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
    rulecore::duration::format_duration(ns)
}

/// `v1.guards`: one block per guard, one line per limit.
fn guards(out: &mut String, reply: &GuardsReply) -> std::fmt::Result {
    let origin = |from_profile: bool| if from_profile { "profile" } else { "rules" };
    if reply.guards.is_empty() && reply.limits.is_empty() {
        return writeln!(out, "no guards and no limits");
    }
    for guard in &reply.guards {
        writeln!(
            out,
            "guard {} ({}, {})",
            plain(&guard.name),
            plain(&guard.file),
            origin(guard.from_profile)
        )?;
        writeln!(out, "  covers {}", plain(&guard.covers))?;
        writeln!(out, "  when   {}", plain(&guard.when))?;
        let reads: Vec<String> = guard.reads.iter().map(|read| plain(read)).collect();
        writeln!(out, "  reads  {}", reads.join(", "))?;
        if let Some(say) = &guard.say {
            writeln!(out, "  say    {}", plain(say))?;
        }
    }
    for limit in &reply.limits {
        writeln!(
            out,
            "limit {} ({}, {}): at most {} per {} of {}",
            plain(&limit.name),
            plain(&limit.file),
            origin(limit.from_profile),
            limit.max,
            go_duration_ms(limit.per_ms),
            plain(&limit.covers)
        )?;
    }
    Ok(())
}

/// A rule's hold (`for`), when it has one running or fired.
fn hold_line(out: &mut String, hold: Option<&Hold>) -> std::fmt::Result {
    match hold {
        Some(Hold::Running { due, left_ms }) => writeln!(
            out,
            "hold running: fires at {}, {} left, unless `when` turns false first",
            instant(Some(*due)),
            millis(*left_ms)
        ),
        Some(Hold::Fired) => writeln!(out, "hold fired: a new one starts once `when` was false"),
        None => Ok(()),
    }
}

/// A duration in ms as seconds (`3.2s`).
fn millis(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `step`, or `finally step` for a run in its finally steps
/// (docs/semantics.md#finally).
fn step_word(run: &RunLine) -> &'static str {
    if run.finally {
        "finally step"
    } else {
        "step"
    }
}

fn when_text(when: Option<&When>) -> String {
    match when {
        None => "(none)".to_string(),
        Some(When::Error { error }) => format!("error: {}", plain(error)),
        Some(When::Result(result)) => result.to_string(),
    }
}

/// What a `when` read, on its own line under it
/// (docs/operating.md#what-a-when-read).
fn write_reads(out: &mut String, reads: &[rulecore::vm::Read]) -> std::fmt::Result {
    if reads.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "           read {}",
        plain(&ruled_engine::read_text(reads))
    )
}

fn test(out: &mut String, reply: &TestReply) -> std::fmt::Result {
    writeln!(
        out,
        "rule {} (dry run: nothing ran, nothing was written)",
        plain(&reply.rule)
    )?;
    writeln!(out, "  enabled  {}", reply.enabled)?;
    writeln!(out, "  matched  {}", reply.matched)?;
    if reply.cancels {
        writeln!(out, "  cancels  its live run and backlog first (cancel-on)")?;
    }
    writeln!(out, "  when     {}", when_text(reply.when.as_ref()))?;
    write_reads(out, &reply.when_read)?;
    for step in &reply.steps {
        // A finally step (docs/rules.md#finally) as `f0`, as `pending` does.
        let index = match (step.finally, step.finally_index) {
            (true, index) => format!("f{}", or_dash(index)),
            (false, _) => step.index.to_string(),
        };
        writeln!(
            out,
            "  step {index}   when {}",
            when_text(step.when.as_ref())
        )?;
        write_reads(out, &step.when_read)?;
        if let Some(guard) = &step.guard {
            guard_line(out, guard)?;
        }
    }
    // A running or fired hold is now, not a would (docs/semantics.md#hold).
    if matches!(reply.verdict, Verdict::Holding { .. } | Verdict::HoldFired) {
        return writeln!(out, "  now      {}", plain(&reply.note));
    }
    let (kind, detail) = verdict_words(&reply.verdict);
    writeln!(out, "  would    {kind} {detail}")
}

/// A step's guards on their fresh read: `guard  refused by
/// hardware-parked (vehicle state = "parked", engine-ecu speed = "6")`.
fn guard_line(out: &mut String, guard: &GuardProbe) -> std::fmt::Result {
    let read: Vec<String> = guard.read.iter().map(|read| plain(read)).collect();
    let names: Vec<String> = guard.guards.iter().map(|name| plain(name)).collect();
    match &guard.refused_by {
        Some(name) => writeln!(
            out,
            "           guard refused by {} ({})",
            plain(name),
            read.join(", ")
        ),
        None => writeln!(
            out,
            "           guard allowed by {} ({})",
            names.join(", "),
            read.join(", ")
        ),
    }
}

/// A verdict's kind and its details (`key value`, keys in the wire's
/// order), as the wire names them.
fn verdict_words(verdict: &Verdict) -> (&'static str, String) {
    match verdict {
        Verdict::Disabled => ("disabled", String::new()),
        Verdict::NotMatched => ("not-matched", String::new()),
        Verdict::WhenFalse => ("when-false", String::new()),
        Verdict::WhenError => ("when-error", String::new()),
        Verdict::Hold { for_ms } => ("hold", format!("for-ms {for_ms}")),
        Verdict::Holding { for_ms, left_ms } => {
            ("holding", format!("for-ms {for_ms} left-ms {left_ms}"))
        }
        Verdict::HoldFired => ("hold-fired", String::new()),
        Verdict::Debounce { window_ms } => ("debounce", format!("window-ms {window_ms}")),
        Verdict::Cooldown { left_ms } => ("cooldown", format!("left-ms {left_ms}")),
        Verdict::Start => ("start", String::new()),
        Verdict::Restart { run } => ("restart", format!("run {}", plain(run))),
        Verdict::Drop { run } => ("drop", format!("run {}", plain(run))),
        Verdict::Queue { position } => ("queue", format!("position {position}")),
        Verdict::Refused { backlog } => ("refused", format!("backlog {backlog}")),
    }
}

fn pending(out: &mut String, reply: &PendingReply) -> std::fmt::Result {
    writeln!(
        out,
        "{:<40} {:<24} {:>4} {:>4} {:<30} DURABLE",
        "RUN", "RULE", "STEP", "PASS", "DUE (unix ms)"
    )?;
    for step in &reply.steps {
        writeln!(
            out,
            "{:<40} {:<24} {:>4} {:>4} {:<30} {}",
            plain(&step.run),
            plain(&step.rule),
            // A finally step (docs/semantics.md#finally) as `f0`.
            format!("{}{}", if step.finally { "f" } else { "" }, step.step),
            step.pass,
            instant(Some(step.due)),
            step.durable,
        )?;
    }
    writeln!(out, "{} waiting", reply.total)?;
    for hold in &reply.holds {
        writeln!(
            out,
            "hold of {} running: fires at {}, {} left, unless `when` turns false first",
            plain(&hold.rule),
            instant(Some(hold.due)),
            millis(hold.left_ms)
        )?;
    }
    Ok(())
}

/// Each trace as `rulec simulate --trace` prints it, times in UTC.
fn trace(out: &mut String, reply: &TraceReply) -> std::fmt::Result {
    if reply.traces.is_empty() {
        return writeln!(
            out,
            "no trace: nothing matched since the start (or traces are off)"
        );
    }
    for trace in &reply.traces {
        write!(out, "{}", trace.to_text(TimeStyle::Utc))?;
    }
    // Only a page short of the whole says so (docs/operating.md#what-happened-traces).
    let shown = match reply.paged {
        super::protocol::Paged::Runs => reply.traces.iter().map(|trace| trace.runs.len()).sum(),
        super::protocol::Paged::Rules => reply.traces.len(),
    };
    if shown < reply.total {
        writeln!(
            out,
            "{shown} of {} {} shown from {}; --offset and --limit page on",
            reply.total,
            reply.paged.word(),
            reply.offset
        )?;
    }
    Ok(())
}

fn reload(out: &mut String, reply: &ReloadReply) -> std::fmt::Result {
    if reply.unchanged {
        return writeln!(
            out,
            "bundle {} is loaded already: nothing changed",
            plain(&reply.bundle)
        );
    }
    writeln!(
        out,
        "bundle {} loaded (was {})",
        plain(&reply.bundle),
        plain(&reply.previous)
    )?;
    for (names, what) in [
        (&reply.added, "added"),
        (&reply.removed, "removed"),
        (&reply.changed, "changed"),
    ] {
        if !names.is_empty() {
            let names: Vec<String> = names.iter().map(|name| plain(name)).collect();
            writeln!(out, "rules {what}: {}", names.join(", "))?;
        }
    }
    writeln!(
        out,
        "runs kept {}, ended {}; subscribed {} channels, {} patterns",
        reply.runs_kept, reply.runs_ended, reply.channels, reply.patterns
    )?;
    reload_overrides(out, reply)
}

/// The overrides in force after a reload, one line each; one that
/// contradicts the bundle says so, and how to remove it.
fn reload_overrides(out: &mut String, reply: &ReloadReply) -> std::fmt::Result {
    for entry in &reply.overrides {
        let name = plain(&entry.name);
        let state = plain(&entry.state);
        match entry.bundle_enabled {
            Some(bundle) if entry.contradicts => writeln!(
                out,
                "override {name} = {state} in force, against the bundle's enabled = {bundle}; \
                 `ruled ctl set-enabled {name} default` removes it"
            )?,
            Some(_) => writeln!(out, "override {name} = {state} in force")?,
            None => writeln!(
                out,
                "override {name} = {state} kept; the bundle has no such rule"
            )?,
        }
    }
    Ok(())
}

fn set_enabled(out: &mut String, reply: &SetEnabledReply) -> std::fmt::Result {
    // An override removed (`set-enabled NAME default`) says it in words.
    if reply.removed.is_some() {
        return writeln!(
            out,
            "rule {}: {}",
            plain(&reply.name),
            plain(&reply.message)
        );
    }
    let changed = if reply.changed { "" } else { " (already)" };
    writeln!(
        out,
        "rule {} is {}{changed}; kept across restarts",
        plain(&reply.name),
        word(reply.enabled == Some(true))
    )?;
    if let Some(run) = &reply.live_run {
        writeln!(out, "its live run {run} finishes")?;
    }
    Ok(())
}

fn add(out: &mut String, reply: &AddReply) -> std::fmt::Result {
    writeln!(
        out,
        "added {}: {}\nrevision {}",
        plain(&reply.name),
        plain(&reply.message),
        plain(&reply.revision)
    )
}

/// `v1.emit`: each matched rule's verdict, as `test` words it (here it
/// was applied: `start`, not `would start`), and the run it started.
fn emit(out: &mut String, reply: &EmitReply) -> std::fmt::Result {
    writeln!(
        out,
        "event {} handed to the rules (not published): {} matched, {} started",
        plain(&reply.topic),
        reply.matched_total,
        reply.started
    )?;
    for matched in &reply.matched {
        let (kind, detail) = verdict_words(&matched.verdict);
        let run = matched
            .run
            .as_deref()
            .map_or_else(String::new, |run| format!("  run {}", plain(run)));
        writeln!(out, "  {:<32} {kind} {detail}{run}", plain(&matched.rule))?;
        if matched.when.is_some() {
            writeln!(out, "           when {}", when_text(matched.when.as_ref()))?;
            write_reads(out, &matched.when_read)?;
        }
    }
    if reply.matched.len() < reply.matched_total {
        writeln!(
            out,
            "  ... {} more matched (`--format json` lists the first {})",
            reply.matched_total - reply.matched.len(),
            reply.matched.len()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Each method's text from a reply as the server writes it: the
    //! layout `ruled ctl` printed before the replies were typed, kept to
    //! the byte (an instant's "in 3.2s" part aside, which moves with the
    //! clock).
    use super::text;
    use serde_json::json;

    /// `text` with each instant's relative part cut: `5 (…)`.
    fn steady(method: &str, reply: &serde_json::Value) -> String {
        let mut out = String::new();
        for line in text(method, reply).lines() {
            let mut kept = String::new();
            let mut rest = line;
            while let Some(at) = rest.find(" (in ").or_else(|| rest.find("s ago)")) {
                let open = rest[..at + 1].rfind(" (").unwrap_or(at);
                let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
                kept.push_str(&rest[..open]);
                kept.push_str(" (…)");
                rest = &rest[close..];
            }
            kept.push_str(rest);
            out.push_str(&kept);
            out.push('\n');
        }
        out
    }

    fn status_reply() -> serde_json::Value {
        json!({
            "version": "0.1.0", "api_version": 1, "revision": "abc", "applied_revision": "abc",
            "pending_restart": false, "queue_depth": 0, "queue_capacity": 256, "workers": 2,
            "busy_workers": 1, "counters": {"fired": "3", "overflow": "0"},
            "bundle": "b1", "compiler": "0.1.0", "namespace": "extensions", "pid": 42,
            "uptime-ms": 12_345, "worker-pool": {"busy": 1, "total": 2},
            "queue": {"depth": 0, "capacity": 256}, "rules": {"total": 1},
            "counter-values": {"fired": 3, "overflow": 0},
            "profile": {"name": "librescoot", "digest": "d"},
            "bus": {"mode": "own", "sources": "used", "watched-hashes": 2, "polls": 0, "owned-topics": 3},
            "last-rebuild": {"at-ms": 0, "ok": true, "first-error": null, "errors": 0,
                             "warnings": 1, "bundle": "b1", "rules": 1},
        })
    }

    #[test]
    fn status_text() {
        assert_eq!(
            steady("v1.status", &status_reply()),
            "ruled 0.1.0  pid 42\nbundle     b1\nrevision   abc\n\
             rebuild    last rebuild ok at 1970-01-01T00:00:00.000Z: bundle b1, 1 rules\n\
             namespace  extensions\nuptime     12s\nworkers    1 busy of 2\nqueue      0 of 256\n\
             rules      1 in the bundle\nprofile    librescoot d\n\
             bus        own, sources used: 2 hashes watched, 0 polls, 3 owned topics\n\
             \x20 fired        3\n  overflow     0\n"
        );
        let mut failed = status_reply();
        failed["last-rebuild"] = json!({"at-ms": 0, "ok": false, "first-error": "E0001 bad\nline",
            "errors": 1, "warnings": 0, "bundle": null, "rules": null});
        failed["profile"] = json!(null);
        let text = steady("v1.status", &failed);
        assert!(
            text.contains(
                "rebuild    last rebuild failed at 1970-01-01T00:00:00.000Z: E0001 bad\\nline\n"
            ),
            "{text}"
        );
        assert!(text.contains("profile    none\n"), "{text}");
        let mut unread = status_reply();
        unread["last-rebuild"] = json!({"unreadable": "timed out"});
        assert!(steady("v1.status", &unread).contains("rebuild    not read: timed out\n"));
        unread["last-rebuild"] = json!(null);
        assert!(steady("v1.status", &unread).contains("rebuild    none recorded\n"));
    }

    fn rule_line(
        name: &str,
        over: serde_json::Value,
        hold: serde_json::Value,
    ) -> serde_json::Value {
        json!({
            "name": name, "source": "a.toml", "enabled": over != json!("disabled"), "protected": false,
            "loaded": true, "last_fire": 0, "errors": 0, "active_runs": 1, "diagnostics": [],
            "bundle-enabled": true, "override": over, "live-runs": 1, "waiting-steps": 1,
            "last-fire": null, "runs": 4, "hold": hold,
        })
    }

    #[test]
    fn list_text() {
        let reply = json!({
            "rules": [rule_line("hazards", json!(null), json!(null)),
                      rule_line("quiet\u{1b}", json!("disabled"), json!({"state": "fired"}))],
            "total": 3, "revision": "abc", "applied_revision": "abc", "pending_restart": false,
            "diagnostics": ["override `ghost` = enabled names no rule of the loaded bundle (kept)"],
            "offset": 0, "limit": 100, "overrides-without-rule-count": 1,
            "overrides-without-rule": [{"name": "ghost", "override": "enabled"}],
        });
        assert_eq!(
            steady("v1.list", &reply),
            "RULE                         ON   BUNDLE OVERRIDE  LIVE WAIT   RUNS ERRORS  LAST FIRE (unix ms)\n\
             hazards                      on   on     none         1    1      4      0  -\n\
             quiet\\u{1b}                  off  on     disabled     1    1      4      0  -\n\
             2 of 3 rules shown from 0\n\
             override `ghost` = enabled names no rule of this bundle (kept)\n"
        );
    }

    #[test]
    fn show_text() {
        let line = rule_line(
            "hazards",
            json!(null),
            json!({"state": "running", "due": 5, "left-ms": 3200}),
        );
        let reply = json!({
            "rule": line, "definition": "[rule]\n", "revision": "abc", "pending_restart": false,
            "dump": {"name": "hazards"}, "text": "rule hazards\n", "state": line,
            "run": {"id": "r1", "step": 1, "pass": 0, "finally": true, "state": "waiting", "due": 5, "durable": true},
            "backlog": 0, "debounce-held": false,
        });
        assert_eq!(
            steady("v1.show", &reply),
            "rule hazards\nnow on (override: -)\n\
             live run r1  finally step 1  pass 0  waiting  due 5 (…)\n\
             hold running: fires at 5 (…), 3.2s left, unless `when` turns false first\n\
             runs 4  errors 0  last fire -\n"
        );
        let mut idle = reply.clone();
        idle["run"] = json!(null);
        idle["state"]["hold"] = json!({"state": "fired"});
        assert_eq!(
            steady("v1.show", &idle),
            "rule hazards\nnow on (override: -)\nno live run\n\
             hold fired: a new one starts once `when` was false\nruns 4  errors 0  last fire -\n"
        );
    }

    #[test]
    fn show_text_lists_the_keys_with_runs() {
        let line = rule_line("per-slot", json!(null), json!(null));
        let run = |id: &str| json!({"id": id, "step": 0, "pass": 0, "state": "waiting", "due": 5, "durable": true});
        let reply = json!({
            "rule": line, "definition": "[rule]\n", "revision": "abc", "pending_restart": false,
            "dump": {"name": "per-slot"}, "text": "rule per-slot\n", "state": line,
            "run": run("r2"), "backlog": 0, "debounce-held": false,
            "keys": [{"key": "1", "run": run("r2")}, {"key": "0", "run": run("r1")}],
            "keys-with-runs": 3,
        });
        assert_eq!(
            steady("v1.show", &reply),
            "rule per-slot\nnow on (override: -)\n\
             live run r2  step 0  pass 0  waiting  due 5 (…)\n\
             keys with a live run: 3\n\
             \x20 key \"1\"  run r2  step 0  pass 0  waiting  due 5 (…)\n\
             \x20 key \"0\"  run r1  step 0  pass 0  waiting  due 5 (…)\n\
             \x20 and 1 more\n\
             runs 4  errors 0  last fire -\n"
        );
    }

    fn test_reply(verdict: serde_json::Value, note: &str) -> serde_json::Value {
        json!({
            "name": "hazards", "enabled": true, "matched": true, "note": note,
            "repeat_count": 0, "repeat_every": "0s", "cooldown": "0s", "debounce": "0s",
            "rule": "hazards", "cancels": true, "when": {"error": "no such field"},
            "steps": [
                {"index": 0, "kind": "redis", "description": "push", "durable": false, "after": "0s",
                 "after-ms": 0, "when": null, "condition": true},
                {"index": 1, "kind": "redis", "description": "finally: push", "durable": true,
                 "after": "1m0s", "after-ms": 60000, "when": false, "finally": true,
                 "finally-index": 0, "condition": false},
            ],
            "verdict": verdict, "error": "when: no such field",
        })
    }

    #[test]
    fn test_text() {
        let holding = test_reply(
            json!({"kind": "holding", "for-ms": 10, "left-ms": 4}),
            "a hold is running",
        );
        assert_eq!(
            steady("v1.test", &holding),
            "rule hazards (dry run: nothing ran, nothing was written)\n  enabled  true\n  matched  true\n\
             \x20 cancels  its live run and backlog first (cancel-on)\n  when     error: no such field\n\
             \x20 step 0   when (none)\n  step f0   when false\n  now      a hold is running\n"
        );
        for (verdict, would) in [
            (json!({"kind": "restart", "run": "r1"}), "restart run r1"),
            (json!({"kind": "start"}), "start "),
            (json!({"kind": "hold", "for-ms": 10}), "hold for-ms 10"),
            (json!({"kind": "queue", "position": 2}), "queue position 2"),
            (
                json!({"kind": "cooldown", "left-ms": 7}),
                "cooldown left-ms 7",
            ),
        ] {
            let text = steady("v1.test", &test_reply(verdict, "n"));
            assert!(text.ends_with(&format!("  would    {would}\n")), "{text}");
        }
    }

    #[test]
    fn pending_text() {
        let reply = json!({
            "total": 2, "offset": 0, "limit": 100,
            "steps": [{"run": "r1", "rule": "hazards", "step": 1, "pass": 0, "due": 5, "durable": true},
                      {"run": "r2", "rule": "other", "step": 0, "pass": 2, "due": 6, "durable": false, "finally": true}],
            "holds": [{"rule": "held", "due": 7, "left-ms": 1500}], "holds-total": 1,
        });
        assert_eq!(
            steady("v1.pending", &reply),
            "RUN                                      RULE                     STEP PASS DUE (unix ms)                  DURABLE\n\
             r1                                       hazards                     1    0 5 (…)          true\n\
             r2                                       other                      f0    2 6 (…)          false\n\
             2 waiting\n\
             hold of held running: fires at 7 (…), 1.5s left, unless `when` turns false first\n"
        );
    }

    #[test]
    fn set_enabled_text() {
        let set = json!({"name": "hazards", "revision": "abc", "pending_restart": false,
            "message": "m", "enabled": false, "changed": false, "live-run": "r1"});
        assert_eq!(
            steady("v1.set-enabled", &set),
            "rule hazards is off (already); kept across restarts\nits live run r1 finishes\n"
        );
        let removed = json!({"name": "hazards", "revision": "abc", "pending_restart": false,
            "message": "had no override; on as its bundle says", "enabled": true, "changed": false,
            "override": null, "removed": null, "live-run": null});
        assert_eq!(
            steady("v1.set-enabled", &removed),
            "rule hazards: had no override; on as its bundle says\n"
        );
    }

    #[test]
    fn reload_and_add_text() {
        let reload = json!({"bundle": "b2", "previous": "b1", "unchanged": false,
            "added": ["new"], "removed": [], "changed": ["a", "b"], "runs-kept": 1, "runs-ended": 0,
            "channels": 3, "patterns": 1,
            "overrides": [
                {"name": "a", "override": "disabled", "bundle-enabled": true, "contradicts": true},
                {"name": "b", "override": "enabled", "bundle-enabled": true, "contradicts": false},
                {"name": "c", "override": "enabled", "bundle-enabled": null, "contradicts": false}]});
        assert_eq!(
            steady("v1.reload", &reload),
            "bundle b2 loaded (was b1)\nrules added: new\nrules changed: a, b\n\
             runs kept 1, ended 0; subscribed 3 channels, 1 patterns\n\
             override a = disabled in force, against the bundle's enabled = true; \
             `ruled ctl set-enabled a default` removes it\n\
             override b = enabled in force\n\
             override c = enabled kept; the bundle has no such rule\n"
        );
        let mut same = reload.clone();
        same["unchanged"] = json!(true);
        assert_eq!(
            steady("v1.reload", &same),
            "bundle b2 is loaded already: nothing changed\n"
        );
        let add = json!({"name": "ping", "revision": "r", "pending_restart": false,
            "message": "written to /x; the rebuild of the rules directory makes it live", "file": "/x"});
        assert_eq!(
            steady("v1.add", &add),
            "added ping: written to /x; the rebuild of the rules directory makes it live\nrevision r\n"
        );
    }

    #[test]
    fn emit_text_lists_each_matched_rule_with_what_was_done() {
        let reply = json!({"topic": "alarm.triggered", "matched-total": 3, "started": 1,
        "matched": [
            {"rule": "hazards", "verdict": {"kind": "start"}, "run": "hazards-1"},
            {"rule": "horn", "verdict": {"kind": "cooldown", "left-ms": 400}, "run": null},
        ]});
        assert_eq!(
            steady("v1.emit", &reply),
            "event alarm.triggered handed to the rules (not published): 3 matched, 1 started\n  \
             hazards                          start   run hazards-1\n  \
             horn                             cooldown left-ms 400\n  \
             ... 1 more matched (`--format json` lists the first 2)\n"
        );
    }

    #[test]
    fn trace_text_says_when_a_page_is_short_of_the_whole() {
        let empty = json!({"traces": [], "paged": "rules", "total": 0, "offset": 0, "limit": 100});
        assert_eq!(
            steady("v1.trace", &empty),
            "no trace: nothing matched since the start (or traces are off)\n"
        );
    }
}
