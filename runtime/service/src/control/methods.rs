//! The control methods (docs/operating.md#ruled-ctl): one table, one entry
//! per method, each a function of the driver's state and the request's
//! payload. Adding a method is adding an entry. Every method answers at
//! once from what the engine holds; only `v1.set-enabled` changes anything.

use super::overrides::{self, Overrides};
use super::wire::{Reply, Request};
use super::Answer;
use rulecore::dump::{rule_json, rule_text};
use rulecore::event::Event;
use ruled_engine::{
    DryRun, Engine, HoldView, Now, RuleTrace, RuleView, RunPhase, StepCheck, Verdict, WaitingStep,
    WhenResult,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// What `v1.status` reports beside the engine's counters.
#[derive(Debug, Clone)]
pub struct ServiceFacts {
    pub bundle_id: String,
    /// The rules directory's digest, with `--rules-dir`.
    pub revision: Option<String>,
    pub namespace: String,
    pub uptime_ms: u64,
    pub workers_busy: usize,
    pub workers: usize,
    pub queue_depth: usize,
    pub queue_capacity: usize,
    /// Every counter of the counters hash and its value now, in the
    /// hash's order (`overflow` and `rejected` included).
    pub counters: Vec<(&'static str, u64)>,
    /// `--sources all|used`.
    pub sources: &'static str,
    /// Hashes whose notifications are subscribed.
    pub watched_hashes: usize,
}

/// What a method may read and change.
#[derive(Debug)]
pub struct Context<'a> {
    pub engine: &'a mut Engine,
    pub now: Now,
    pub facts: ServiceFacts,
    pub overrides: &'a mut Overrides,
    /// The request was signed with the control key, and verified
    /// (docs/operating.md#trust).
    pub signed: bool,
}

/// A method's result: the reply payload, and an override to keep (`None`
/// for the rule: removed).
pub(super) struct Done {
    pub(super) payload: Value,
    pub(super) keep: Option<(String, Option<bool>)>,
}

impl From<Value> for Done {
    fn from(payload: Value) -> Self {
        Self {
            payload,
            keep: None,
        }
    }
}

type Handler = fn(&mut Context<'_>, &Value) -> Result<Done, String>;

/// One method of the table.
#[derive(Debug)]
pub struct Method {
    pub name: &'static str,
    handle: Handler,
}

/// Every method this `ruled` answers.
pub const METHODS: &[Method] = &[
    Method {
        name: "v1.status",
        handle: status,
    },
    Method {
        name: "v1.list",
        handle: list,
    },
    Method {
        name: "v1.show",
        handle: show,
    },
    Method {
        name: "v1.test",
        handle: test,
    },
    Method {
        name: "v1.pending",
        handle: pending,
    },
    Method {
        name: "v1.set-enabled",
        handle: set_enabled,
    },
    Method {
        name: "v1.trace",
        handle: trace,
    },
    Method {
        name: "v1.add",
        handle: add,
    },
];

/// The method the driver answers itself, since it reads the bundle file
/// and changes the subscription (docs/operating.md#deploying-a-new-bundle).
pub const RELOAD: &str = "v1.reload";

/// `v1.reload`'s payload: `{}` (or none), refused with a field it does not
/// know, as every method's.
pub fn check_reload_payload(payload: &Value) -> Result<(), String> {
    args::<Empty>(payload).map(drop)
}

/// Answers one request.
pub fn answer(ctx: &mut Context<'_>, request: &Request) -> Answer {
    let Some(method) = METHODS.iter().find(|m| m.name == request.method) else {
        let mut names: Vec<&str> = METHODS.iter().map(|m| m.name).collect();
        names.push(RELOAD);
        return Answer {
            reply: Reply::error(format!(
                "unknown method `{}`; this ruled answers {}",
                request.method.chars().take(100).collect::<String>(),
                names.join(", ")
            )),
            keep: None,
        };
    };
    let outcome = (method.handle)(ctx, &request.payload);
    // docs/operating.md#trust: every change a request asks for is logged at
    // `warn`; `v1.set-enabled` logs its own, with the change.
    if super::trust::changes_state(method.name) && method.name != "v1.set-enabled" {
        tracing::warn!(
            method = method.name,
            rule = %named(&request.payload),
            signed = ctx.signed,
            ok = outcome.is_ok(),
            "control request"
        );
    }
    match outcome {
        Ok(done) => Answer {
            reply: Reply::ok(done.payload),
            keep: done.keep,
        },
        Err(error) => Answer {
            reply: Reply::error(format!("{}: {error}", method.name)),
            keep: None,
        },
    }
}

/// The payload's `name`, escaped and clipped for a log line; `-` if none.
fn named(payload: &Value) -> String {
    payload["name"].as_str().map_or_else(
        || "-".to_string(),
        |name| crate::logging::escape_controls(&name.as_bytes()[..name.len().min(200)]),
    )
}

/// The payload as `T`; `null` reads as `{}`.
fn args<T: for<'de> Deserialize<'de>>(payload: &Value) -> Result<T, String> {
    let payload = if payload.is_null() {
        &json!({})
    } else {
        payload
    };
    T::deserialize(payload).map_err(|e| format!("bad payload: {e}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

/// Rules or steps per page unless asked otherwise, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

impl Page {
    fn checked(self) -> Result<Self, String> {
        if self.limit == 0 || self.limit > MAX_LIMIT {
            return Err(format!(
                "`limit` must be 1 to {MAX_LIMIT}, not {}",
                self.limit
            ));
        }
        Ok(self)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    name: String,
}

fn status(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    args::<Empty>(payload)?;
    let facts = &ctx.facts;
    let payload = ctx.engine.payload();
    let counters = counters_json(&facts.counters);
    Ok(json!({
        // The fields `lsc ext status` reads (docs/operating.md#the-fields-lsc-reads).
        "version": env!("CARGO_PKG_VERSION"),
        "api_version": API_VERSION,
        "revision": revision(facts),
        "applied_revision": revision(facts),
        "pending_restart": false,
        "queue_depth": facts.queue_depth,
        "queue_capacity": facts.queue_capacity,
        "workers": facts.workers,
        "busy_workers": facts.workers_busy,
        "counters": counter_strings(&counters),
        // Ours.
        "bundle": facts.bundle_id,
        "compiler": payload.compiler_version,
        "namespace": facts.namespace,
        "pid": std::process::id(),
        "uptime-ms": facts.uptime_ms,
        "worker-pool": {"busy": facts.workers_busy, "total": facts.workers},
        "queue": {"depth": facts.queue_depth, "capacity": facts.queue_capacity},
        "rules": {"total": payload.rules.len()},
        "counter-values": counters,
        "profile": ctx.engine.profile().map(|(name, digest)| json!({"name": name, "digest": digest})),
        "bus": {
            "mode": crate::bus::bus_word(ctx.engine.bus_mode()),
            "sources": facts.sources,
            "watched-hashes": facts.watched_hashes,
            "polls": ctx.engine.polls().len(),
            "owned-topics": ctx.engine.owned_topics().len(),
        },
    })
    .into())
}

/// The protocol version `v1.status` reports as `api_version`.
const API_VERSION: u32 = 1;

/// The revision of the loaded rules (docs/operating.md#revisions): with
/// `--rules-dir` the directory's digest, else the bundle's id (a digest of
/// its contents). Changes apply live, so it is also the applied revision.
pub(super) fn revision(facts: &ServiceFacts) -> &str {
    facts.revision.as_deref().unwrap_or(&facts.bundle_id)
}

/// The counters with every value as a string, as `lsc` decodes them.
fn counter_strings(counters: &Value) -> Value {
    let strings: serde_json::Map<String, Value> = counters
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.clone(), Value::String(value.to_string())))
        .collect();
    Value::Object(strings)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

fn counters_json(counters: &[(&'static str, u64)]) -> Value {
    let map: serde_json::Map<String, Value> = counters
        .iter()
        .map(|&(name, value)| (name.to_string(), json!(value)))
        .collect();
    Value::Object(map)
}

fn list(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let page = args::<Page>(payload)?.checked()?;
    let views = ctx.engine.rule_views(ctx.now);
    let total = views.len();
    let rules: Vec<Value> = views
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .map(|view| {
            let protected = overrides::is_protected(ctx.engine, &view.name);
            rule_line(view, ctx.overrides.get(&view.name), protected)
        })
        .collect();
    // Stored overrides naming no rule: the first few by name (the rest
    // counted), said in words where `lsc` shows them.
    let unknown: Vec<(&str, bool)> = ctx
        .overrides
        .iter()
        .filter(|(rule, _)| ctx.engine.rule_index(rule).is_none())
        .chain(
            ctx.overrides
                .shown_without_rule()
                .iter()
                .map(|(rule, on)| (rule.as_str(), *on)),
        )
        .take(overrides::SHOWN_WITHOUT_RULE)
        .collect();
    let diagnostics: Vec<String> = unknown
        .iter()
        .map(|(rule, on)| {
            format!(
                "override `{rule}` = {} names no rule of the loaded bundle (kept)",
                overrides::word(*on)
            )
        })
        .collect();
    let without_rule_count = ctx.overrides.without_rule().max(unknown.len());
    let unknown: Vec<Value> = unknown
        .iter()
        .map(|(rule, on)| json!({"name": rule, "override": overrides::word(*on)}))
        .collect();
    Ok(json!({
        "rules": rules,
        "total": total,
        "revision": revision(&ctx.facts),
        "applied_revision": revision(&ctx.facts),
        "pending_restart": false,
        "diagnostics": diagnostics,
        "offset": page.offset,
        "limit": page.limit,
        "overrides-without-rule-count": without_rule_count,
        "overrides-without-rule": unknown,
    })
    .into())
}

/// One rule's line in `v1.list` (and the state part of `v1.show`).
fn rule_line(view: &RuleView, override_of: Option<bool>, protected: bool) -> Value {
    let waiting = view.run.as_ref().is_some_and(|run| {
        matches!(
            run.phase,
            RunPhase::Waiting { .. } | RunPhase::WaitingForRoom { .. }
        )
    });
    json!({
        // `lsc`'s RuleSummary (docs/operating.md#the-fields-lsc-reads).
        "name": &*view.name,
        "source": view.source,
        "enabled": view.enabled,
        // docs/operating.md#trust.
        "protected": protected,
        // Every rule listed is one of the loaded bundle.
        "loaded": true,
        "last_fire": view.stats.last_fire_ms.unwrap_or(0),
        "errors": view.stats.errors,
        "active_runs": u8::from(view.run.is_some()),
        "diagnostics": Vec::<String>::new(),
        // Ours.
        "bundle-enabled": view.bundle_enabled,
        "override": override_of.map(overrides::word),
        "live-runs": u8::from(view.run.is_some()),
        "waiting-steps": u8::from(waiting),
        "last-fire": view.stats.last_fire_ms,
        "runs": view.stats.runs_started,
        "hold": view.hold.map(hold_json),
    })
}

/// A rule's hold (`for`, docs/semantics.md#hold): running with its due
/// time and what is left, or fired.
fn hold_json(hold: HoldView) -> Value {
    match hold {
        HoldView::Running { due_ms, left_ms } => {
            json!({"state": "running", "due": due_ms, "left-ms": left_ms})
        }
        HoldView::Fired => json!({"state": "fired"}),
    }
}

fn show(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let Named { name } = args(payload)?;
    let view = ctx
        .engine
        .rule_view(&name, ctx.now)
        .ok_or_else(|| no_rule(ctx.engine, &name))?;
    let index = ctx.engine.rule_index(&name).unwrap_or_default();
    let payload = ctx.engine.payload();
    let rule = &payload.rules[index];
    let run = view.run.as_ref().map(|run| {
        let mut line = json!({"id": &*run.run, "step": run.step, "pass": run.pass});
        if run.finally {
            // docs/semantics.md#finally: `step` counts the finally steps.
            line["finally"] = json!(true);
        }
        phase_json(&mut line, run.phase);
        line
    });
    let line = rule_line(&view, ctx.overrides.get(&name), rule.protected());
    Ok(json!({
        // What `lsc ext show` reads (docs/operating.md#the-fields-lsc-reads).
        "rule": line,
        "definition": super::definition::rule_toml(rule, payload),
        "revision": revision(&ctx.facts),
        "pending_restart": false,
        // As `rulec dump` shows it, in both of its forms.
        "dump": rule_json(rule, payload),
        "text": rule_text(rule, payload),
        "state": line,
        "run": run,
        "backlog": view.backlog,
        "debounce-held": view.debounce_held,
    })
    .into())
}

fn phase_json(line: &mut Value, phase: RunPhase) {
    let (state, due, durable) = match phase {
        RunPhase::Waiting { due_ms, durable } => ("waiting", Some(due_ms), Some(durable)),
        RunPhase::Gap { due_ms } => ("repeat-gap", Some(due_ms), None),
        RunPhase::WaitingForRoom { due_ms } => ("waiting-for-room", Some(due_ms), Some(true)),
        RunPhase::Acting => ("acting", None, None),
        RunPhase::Draining => ("draining", None, None),
    };
    line["state"] = json!(state);
    line["due"] = json!(due);
    if let Some(durable) = durable {
        line["durable"] = json!(durable);
    }
}

pub(super) fn no_rule(engine: &Engine, name: &str) -> String {
    let names: Vec<&str> = engine.payload().rules.iter().map(|r| &*r.name).collect();
    match rulecore::suggest::did_you_mean(name, &names) {
        Some(near) => format!("the bundle has no rule `{name}`; did you mean `{near}`?"),
        None => format!("the bundle has no rule `{name}`"),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestArgs {
    name: String,
    event: Value,
}

fn test(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let TestArgs { name, event } = args(payload)?;
    let bytes = serde_json::to_vec(&event).map_err(|e| format!("event: {e}"))?;
    let event = Event::decode(&bytes).map_err(|e| format!("`event` is not an event: {e}"))?;
    let dry = ctx
        .engine
        .dry_run(&name, &event, ctx.now)
        .ok_or_else(|| no_rule(ctx.engine, &name))?;
    let index = ctx.engine.rule_index(&name).unwrap_or_default();
    Ok(dry_run_json(&dry, &ctx.engine.payload().rules[index]).into())
}

fn when_json(when: Option<&WhenResult>) -> Value {
    match when {
        None => Value::Null,
        Some(WhenResult::True) => json!(true),
        Some(WhenResult::False) => json!(false),
        Some(WhenResult::Error(error)) => json!({"error": error}),
    }
}

/// `lsc`'s reading of a `when` (docs/operating.md#the-fields-lsc-reads):
/// `condition` always, since `lsc` prints it as a bool and reads a missing
/// one as `false`: `true` without a `when` (the step would run), the
/// `when`'s result, `false` when it failed; `error` (a string) only then.
fn lsc_when(line: &mut Value, when: Option<&WhenResult>) {
    line["condition"] = json!(matches!(when, None | Some(WhenResult::True)));
    if let Some(WhenResult::Error(error)) = when {
        line["error"] = json!(error);
    }
}

/// Milliseconds as `lsc` prints a wait: a Go duration (`30s`, `1m0s`).
fn go_duration_ms(ms: u64) -> String {
    go_duration_ns(ms.saturating_mul(1_000_000))
}

fn go_duration_ns(ns: u64) -> String {
    rulecore::duration::format_duration(i64::try_from(ns).unwrap_or(i64::MAX))
}

/// One step's line: `lsc`'s fields and ours; `finally` marks a finally
/// step (its `description` says so too, for `lsc`, which prints it).
fn step_line(
    check: &StepCheck,
    spec: Option<&rulecore::bundle::Step>,
    index: usize,
    finally: bool,
) -> Value {
    let description = spec.map(|spec| {
        let said = super::definition::describe(&spec.action);
        if finally {
            format!("finally: {said}")
        } else {
            said
        }
    });
    let mut line = json!({
        "index": index,
        "kind": spec.map(|spec| super::definition::kind(&spec.action)),
        "description": description,
        "durable": check.durable,
        "after": go_duration_ms(check.after_ms),
        "after-ms": check.after_ms,
        "when": when_json(check.when.as_ref()),
    });
    if finally {
        line["finally"] = json!(true);
        line["finally-index"] = json!(check.index);
    }
    lsc_when(&mut line, check.when.as_ref());
    line
}

/// The rule's steps, then its finally steps (numbered on after them, as
/// `lsc` lists one sequence).
fn steps_json(dry: &DryRun, rule: &rulecore::bundle::Rule) -> Vec<Value> {
    let steps = dry
        .steps
        .iter()
        .map(|check| (check, spec_of(&rule.steps, check), false));
    let finally = dry
        .finally
        .iter()
        .map(|check| (check, spec_of(rule.finally(), check), true));
    steps
        .chain(finally)
        .enumerate()
        .map(|(index, (check, spec, finally))| step_line(check, spec, index, finally))
        .collect()
}

/// The step of `steps` a check is of.
fn spec_of<'a>(
    steps: &'a [rulecore::bundle::Step],
    check: &StepCheck,
) -> Option<&'a rulecore::bundle::Step> {
    usize::try_from(check.index).ok().and_then(|i| steps.get(i))
}

fn dry_run_json(dry: &DryRun, rule: &rulecore::bundle::Rule) -> Value {
    let repeat = rule.repeat();
    let mut reply = json!({
        // What `lsc ext test` reads (docs/operating.md#the-fields-lsc-reads).
        "name": &*dry.rule,
        "enabled": dry.enabled,
        "matched": dry.matched,
        "note": verdict_note(&dry.verdict),
        "repeat_count": repeat.count,
        "repeat_every": go_duration_ns(repeat.every_ns),
        "cooldown": go_duration_ns(rule.cooldown_ns()),
        "debounce": go_duration_ns(rule.debounce_ns()),
        // Ours.
        "rule": &*dry.rule,
        "cancels": dry.cancels,
        "when": when_json(dry.when.as_ref()),
        "steps": steps_json(dry, rule),
        "verdict": verdict_json(&dry.verdict),
    });
    if let Some(WhenResult::Error(error)) = &dry.when {
        reply["error"] = json!(format!("when: {error}"));
    }
    reply
}

/// The verdict in words, `lsc`'s `note`.
fn verdict_note(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Disabled => "the rule is off: nothing would happen".to_string(),
        Verdict::NotMatched => "no `on` pattern matches the topic".to_string(),
        Verdict::WhenFalse => "`when` is false: no run would start".to_string(),
        Verdict::WhenError => "`when` fails: no run would start".to_string(),
        Verdict::Hold { for_ms } => format!("would fire once `when` stays true for {for_ms} ms"),
        Verdict::Holding { left_ms, .. } => format!(
            "a hold is running: it fires in {left_ms} ms unless `when` turns false first \
             (this event would be the held one)"
        ),
        Verdict::HoldFired => {
            "the hold completed already: a new one starts once `when` was false".to_string()
        }
        Verdict::Debounce { window_ms } => {
            format!("would fire after {window_ms} ms without a newer match")
        }
        Verdict::Cooldown { left_ms } => format!("in its cooldown for {left_ms} ms more"),
        Verdict::Start => "would start a run".to_string(),
        Verdict::Restart { run } => format!("would end run {run} and start a new one"),
        Verdict::Drop { run } => format!("would be dropped: run {run} goes on"),
        Verdict::Queue { position } => format!("would be queued at position {position}"),
        Verdict::Refused { backlog } => format!("would be refused: the backlog holds {backlog}"),
    }
}

fn verdict_json(verdict: &Verdict) -> Value {
    match verdict {
        Verdict::Disabled => json!({"kind": "disabled"}),
        Verdict::NotMatched => json!({"kind": "not-matched"}),
        Verdict::WhenFalse => json!({"kind": "when-false"}),
        Verdict::WhenError => json!({"kind": "when-error"}),
        Verdict::Hold { for_ms } => json!({"kind": "hold", "for-ms": for_ms}),
        Verdict::Holding { for_ms, left_ms } => {
            json!({"kind": "holding", "for-ms": for_ms, "left-ms": left_ms})
        }
        Verdict::HoldFired => json!({"kind": "hold-fired"}),
        Verdict::Debounce { window_ms } => json!({"kind": "debounce", "window-ms": window_ms}),
        Verdict::Cooldown { left_ms } => json!({"kind": "cooldown", "left-ms": left_ms}),
        Verdict::Start => json!({"kind": "start"}),
        Verdict::Restart { run } => json!({"kind": "restart", "run": &**run}),
        Verdict::Drop { run } => json!({"kind": "drop", "run": &**run}),
        Verdict::Queue { position } => json!({"kind": "queue", "position": position}),
        Verdict::Refused { backlog } => json!({"kind": "refused", "backlog": backlog}),
    }
}

fn pending(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let page = args::<Page>(payload)?.checked()?;
    let waiting = ctx.engine.waiting_steps(ctx.now);
    let steps: Vec<Value> = waiting
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .map(|step: &WaitingStep| {
            let mut line = json!({
                "run": &*step.run, "rule": &*step.rule, "step": step.step,
                "pass": step.pass, "due": step.due_ms, "durable": step.durable,
            });
            if step.finally {
                line["finally"] = json!(true);
            }
            line
        })
        .collect();
    // Running holds (`for`): not steps, but what the rule waits for.
    let running = ctx.engine.running_holds(ctx.now);
    let holds: Vec<Value> = running
        .iter()
        .take(MAX_LIMIT)
        .map(|hold| json!({"rule": &*hold.rule, "due": hold.due_ms, "left-ms": hold.left_ms}))
        .collect();
    Ok(json!({
        "total": waiting.len(),
        "offset": page.offset,
        "limit": page.limit,
        "steps": steps,
        "holds": holds,
        "holds-total": running.len(),
    })
    .into())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetEnabled {
    name: String,
    /// `true`, `false`, or `null` to remove the override; required (a
    /// `Value`, so an absent field is an error, not a removal).
    enabled: Value,
    /// The revision the client read (docs/operating.md#revisions); absent
    /// or empty: no check.
    #[serde(default)]
    expected_revision: String,
}

fn set_enabled(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let SetEnabled {
        name,
        enabled,
        expected_revision,
    } = args(payload)?;
    let loaded = revision(&ctx.facts);
    if !expected_revision.is_empty() && expected_revision != loaded {
        return Err(format!(
            "the rules changed since they were read: expected revision `{}`, the loaded \
             revision is `{loaded}`; nothing was changed, read them again and retry",
            expected_revision.chars().take(100).collect::<String>()
        ));
    }
    let enabled = match enabled {
        Value::Bool(enabled) => enabled,
        Value::Null => return super::override_removal::remove(ctx, name),
        _ => return Err("`enabled` must be true, false, or null (remove the override)".into()),
    };
    if ctx.engine.rule_index(&name).is_none() {
        return Err(no_rule(ctx.engine, &name));
    }
    let protected = overrides::is_protected(ctx.engine, &name);
    if protected && !enabled && !ctx.signed {
        tracing::warn!(rule = %name, "control request v1.set-enabled refused: turning a protected rule off, unsigned");
        return Err(format!(
            "rule `{name}` is protected (`protected = true`): only a request signed with the \
             control key turns it off (`ruled ctl --control-key FILE`, and ruled started \
             with --control-key); nothing was changed"
        ));
    }
    let changed = match ctx.engine.set_enabled(&name, enabled) {
        Ok(change) => change == ruled_engine::EnableChange::Changed,
        Err(_) => return Err(no_rule(ctx.engine, &name)),
    };
    ctx.overrides.set(&name, enabled, ctx.signed && protected);
    let live_run = live_run(ctx, &name);
    tracing::warn!(
        rule = %name,
        state = overrides::word(enabled),
        changed,
        signed = ctx.signed,
        "control request v1.set-enabled: override set"
    );
    Ok(Done {
        payload: json!({
            // `lsc`'s mutation reply (docs/operating.md#the-fields-lsc-reads).
            "name": name,
            "revision": revision(&ctx.facts),
            "pending_restart": false,
            "message": set_enabled_message(enabled, changed, live_run.as_deref()),
            // Ours.
            "enabled": enabled,
            "changed": changed,
            "live-run": live_run,
        }),
        keep: Some((name, Some(enabled))),
    })
}

/// The id of `name`'s live run, if it has one.
pub(super) fn live_run(ctx: &Context<'_>, name: &str) -> Option<String> {
    ctx.engine
        .rule_view(name, ctx.now)
        .and_then(|view| view.run)
        .map(|run| run.run.to_string())
}

/// What `v1.set-enabled` did, in words.
fn set_enabled_message(enabled: bool, changed: bool, live_run: Option<&str>) -> String {
    let state = if enabled { "on" } else { "off" };
    let mut message = if changed {
        format!("turned {state} now, no restart needed; kept across restarts")
    } else {
        format!("already {state}; kept across restarts")
    };
    if let (false, Some(run)) = (enabled, live_run) {
        message.push_str(&format!("; its live run {run} finishes"));
    }
    message
}

/// `v1.add` without `--rules-dir` (with one, the control server answers
/// it: [`super::add`]).
fn add(_: &mut Context<'_>, _: &Value) -> Result<Done, String> {
    Err(
        "rules are not added to a running ruled: write them as rule files, compile them \
         with `rulec build`, and deploy the bundle (replace the file `ruled --bundle` names \
         by rename, then `ruled ctl reload`); a ruled started with `--rules-dir` takes \
         `v1.add` into that directory"
            .to_string(),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceArgs {
    name: Option<String>,
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

/// `v1.trace {name?, offset?, limit?}`: one rule's traces, or every traced
/// rule's (docs/semantics.md#traces); `{"traces": [...]}` either way, with
/// `total`, `offset` and `limit`. With a name the page is over the rule's
/// runs (oldest first; its last non-fire on every page), so a trace too
/// long for one reply is read page by page; without, over the traced rules.
fn trace(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let TraceArgs {
        name,
        offset,
        limit,
    } = args(payload)?;
    let page = Page { offset, limit }.checked()?;
    let paged = if name.is_some() { "runs" } else { "rules" };
    let (traces, total): (Vec<RuleTrace>, usize) = match name {
        Some(name) => {
            if ctx.engine.rule_index(&name).is_none() {
                return Err(no_rule(ctx.engine, &name));
            }
            match ctx.engine.trace(&name, ctx.now) {
                Some(mut trace) => {
                    let total = trace.runs.len();
                    trace.runs = trace
                        .runs
                        .into_iter()
                        .skip(page.offset)
                        .take(page.limit)
                        .collect();
                    (vec![trace], total)
                }
                None => (Vec::new(), 0),
            }
        }
        None => {
            let all = ctx.engine.traces(ctx.now);
            let total = all.len();
            (
                all.into_iter().skip(page.offset).take(page.limit).collect(),
                total,
            )
        }
    };
    let traces = serde_json::to_value(traces).map_err(|e| e.to_string())?;
    Ok(json!({
        "traces": traces,
        "paged": paged,
        "total": total,
        "offset": page.offset,
        "limit": page.limit,
    })
    .into())
}
