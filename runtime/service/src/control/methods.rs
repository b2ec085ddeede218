//! The control methods (docs/operating.md#ruled-ctl): one table, one entry
//! per method, each a function of the driver's state and the request's
//! payload. Adding a method is adding an entry. Every method answers at
//! once from what the engine holds; `v1.set-enabled` and `v1.emit` change
//! something.

use super::overrides::{self, Overrides};
use super::protocol::{
    self, BusFacts, EmitReply, EmitRequest, Empty, Hold, KeyRunLine, ListReply, Matched, Named,
    OverrideWithoutRule, Page, Paged, PendingHold, PendingReply, PendingStep, ProfileFacts,
    QueueFacts, RuleCount, RuleLine, RunLine, RunState, SetEnabledReply, SetEnabledRequest,
    ShowReply, StatusReply, StepLine, TestReply, TestRequest, TraceReply, TraceRequest, When,
    WorkerPool, EMIT_SHOWN, MAX_LIMIT,
};
use super::wire::{Reply, Request};
use super::Answer;
use rulecore::dump::{rule_json, rule_text};
use rulecore::event::Event;
use ruled_engine::{
    DryRun, Engine, HoldView, Now, RuleTrace, RuleView, RunPhase, RunView, StepCheck, Verdict,
    WaitingStep, WhenCheck, WhenResult,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// `--pending-file`'s replay waits for the wall clock
    /// (docs/service.md#the-pending-file).
    pub replay_held: bool,
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
    /// `v1.test`'s guarded steps, judged by the server on a fresh read.
    pub(super) probe: Option<Box<super::guard_probe::Probe>>,
}

impl Done {
    /// A reply that keeps no override.
    pub(super) fn reply(reply: &impl Serialize) -> Result<Self, String> {
        Ok(Self {
            payload: encoded(reply)?,
            keep: None,
            probe: None,
        })
    }
}

/// A typed reply as the payload's JSON: through `Value`, whose objects
/// keep their keys sorted, so the wire text is as it always was.
pub(crate) fn encoded(reply: &impl Serialize) -> Result<Value, String> {
    serde_json::to_value(reply).map_err(|e| format!("reply not encodable: {e}"))
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
        name: "v1.guards",
        handle: guards,
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
    Method {
        name: "v1.emit",
        handle: emit,
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
        return Answer::reply(Reply::error(format!(
            "unknown method `{}`; this ruled answers {}",
            request.method.chars().take(100).collect::<String>(),
            names.join(", ")
        )));
    };
    let outcome = (method.handle)(ctx, &request.payload);
    // docs/operating.md#trust: every change a request asks for is logged at
    // `warn`; `v1.set-enabled` and `v1.emit` log their own, with the change.
    if super::trust::changes_state(method.name)
        && !matches!(method.name, "v1.set-enabled" | "v1.emit")
    {
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
            probe: done.probe,
        },
        Err(error) => Answer::reply(Reply::error(format!("{}: {error}", method.name))),
    }
}

/// The payload's `name`, escaped and clipped for a log line; `-` if none.
fn named(payload: &Value) -> String {
    field_of(payload, "name")
}

/// The payload's string `key`, escaped and clipped for a log line; `-`
/// if none.
fn field_of(payload: &Value, key: &str) -> String {
    payload[key].as_str().map_or_else(
        || "-".to_string(),
        |name| crate::logging::escape_controls(&name.as_bytes()[..name.len().min(200)]),
    )
}

/// The payload as `T`; `null` reads as `{}`.
fn args<T: for<'de> Deserialize<'de>>(payload: &Value) -> Result<T, String> {
    let empty = Value::Object(serde_json::Map::new());
    let payload = if payload.is_null() { &empty } else { payload };
    T::deserialize(payload).map_err(|e| format!("bad payload: {e}"))
}

fn status(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    args::<Empty>(payload)?;
    let facts = &ctx.facts;
    let payload = ctx.engine.payload();
    let counters = &facts.counters;
    Done::reply(&StatusReply {
        // The fields `lsc ext status` reads (docs/operating.md#the-fields-lsc-reads).
        version: env!("CARGO_PKG_VERSION").to_string(),
        api_version: API_VERSION,
        revision: revision(facts).to_string(),
        applied_revision: revision(facts).to_string(),
        pending_restart: false,
        queue_depth: facts.queue_depth,
        queue_capacity: facts.queue_capacity,
        workers: facts.workers,
        busy_workers: facts.workers_busy,
        counters: counters
            .iter()
            .map(|&(name, value)| (name.to_string(), value.to_string()))
            .collect(),
        // Ours.
        bundle: facts.bundle_id.clone(),
        compiler: payload.compiler_version.clone(),
        namespace: facts.namespace.clone(),
        pid: std::process::id(),
        uptime_ms: facts.uptime_ms,
        worker_pool: WorkerPool {
            busy: facts.workers_busy,
            total: facts.workers,
        },
        queue: QueueFacts {
            depth: facts.queue_depth,
            capacity: facts.queue_capacity,
        },
        rules: RuleCount {
            total: payload.rules.len(),
        },
        counter_values: counters
            .iter()
            .map(|&(name, value)| (name.to_string(), value))
            .collect(),
        profile: ctx.engine.profile().map(|(name, digest)| ProfileFacts {
            name: name.to_string(),
            digest: digest.to_string(),
        }),
        bus: BusFacts {
            mode: crate::bus::bus_word(ctx.engine.bus_mode()).to_string(),
            sources: facts.sources.to_string(),
            watched_hashes: facts.watched_hashes,
            polls: ctx.engine.polls().len(),
            owned_topics: ctx.engine.owned_topics().len(),
        },
        // The control server reads it (`local`).
        last_rebuild: None,
        replay_held: facts.replay_held,
        schedules: {
            let timezone = ctx.engine.zone_name();
            ctx.engine
                .schedules()
                .into_iter()
                .map(|view| super::protocol::ScheduleFacts {
                    rule: view.rule.to_string(),
                    topic: view.topic.to_string(),
                    at: view.at,
                    next_fire_ms: view.next_fire_ms,
                    timezone: timezone.clone(),
                })
                .collect()
        },
    })
}

/// The protocol version `v1.status` reports as `api_version`.
const API_VERSION: u32 = 1;

/// The revision of the loaded rules (docs/operating.md#revisions): with
/// `--rules-dir` the directory's digest, else the bundle's id (a digest of
/// its contents). Changes apply live, so it is also the applied revision.
pub(super) fn revision(facts: &ServiceFacts) -> &str {
    facts.revision.as_deref().unwrap_or(&facts.bundle_id)
}

fn list(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let page = args::<Page>(payload)?.checked()?;
    let views = ctx.engine.rule_views(ctx.now);
    let total = views.len();
    let rules: Vec<RuleLine> = views
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
    let unknown = unknown
        .iter()
        .map(|(rule, on)| OverrideWithoutRule {
            name: rule.to_string(),
            state: overrides::word(*on).to_string(),
        })
        .collect();
    Done::reply(&ListReply {
        rules,
        total,
        revision: revision(&ctx.facts).to_string(),
        applied_revision: revision(&ctx.facts).to_string(),
        pending_restart: false,
        diagnostics,
        offset: page.offset,
        limit: page.limit,
        overrides_without_rule_count: without_rule_count,
        overrides_without_rule: unknown,
    })
}

/// One rule's line in `v1.list` (and the state part of `v1.show`).
fn rule_line(view: &RuleView, override_of: Option<bool>, protected: bool) -> RuleLine {
    // A keyed rule counts every key's run (docs/rules.md#keyed-runs).
    let waiting = view
        .run
        .as_ref()
        .is_some_and(|run| run.phase.waits_for_step());
    let live =
        u8::try_from(view.keys_with_runs.max(usize::from(view.run.is_some()))).unwrap_or(u8::MAX);
    let waiting = u8::try_from(view.keys_waiting.max(usize::from(waiting))).unwrap_or(u8::MAX);
    RuleLine {
        // `lsc`'s RuleSummary (docs/operating.md#the-fields-lsc-reads).
        name: view.name.to_string(),
        source: view.source.clone(),
        enabled: view.enabled,
        protected,
        loaded: true,
        last_fire: view.stats.last_fire_ms.unwrap_or(0),
        errors: view.stats.errors,
        active_runs: live,
        diagnostics: Vec::new(),
        // Ours.
        bundle_enabled: view.bundle_enabled,
        override_state: override_of.map(|on| overrides::word(on).to_string()),
        live_runs: live,
        waiting_steps: waiting,
        last_fire_ms: view.stats.last_fire_ms,
        runs: view.stats.runs_started,
        hold: view.hold.map(hold_of),
    }
}

/// A rule's hold (`for`, docs/semantics.md#hold) on the wire.
fn hold_of(hold: HoldView) -> Hold {
    match hold {
        HoldView::Running { due_ms, left_ms } => Hold::Running {
            due: due_ms,
            left_ms,
        },
        HoldView::Fired => Hold::Fired,
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
    let run = view.run.as_ref().map(run_line);
    let keys = (view.keys.iter())
        .map(|key| KeyRunLine {
            key: key.key.to_string(),
            run: run_line(&key.run),
        })
        .collect();
    let line = rule_line(&view, ctx.overrides.get(&name), rule.protected());
    Done::reply(&ShowReply {
        // What `lsc ext show` reads (docs/operating.md#the-fields-lsc-reads).
        rule: line.clone(),
        definition: super::definition::rule_toml(rule, payload),
        revision: revision(&ctx.facts).to_string(),
        pending_restart: false,
        // As `rulec dump` shows it, in both of its forms.
        dump: rule_json(rule, payload),
        text: rule_text(rule, payload),
        state: line,
        run,
        backlog: view.backlog,
        debounce_held: view.debounce_held,
        keys,
        keys_with_runs: view.keys_with_runs,
        envelope: super::envelope::covered_steps(rule, payload),
    })
}

/// A live run as the wire says it.
fn run_line(run: &RunView) -> RunLine {
    let (state, due, durable) = phase_of(run.phase);
    RunLine {
        id: run.run.to_string(),
        // docs/semantics.md#finally: `step` counts the finally steps.
        step: run.step,
        pass: run.pass,
        finally: run.finally,
        state,
        due,
        durable,
    }
}

/// `v1.guards`: the bundle's guards and limits (docs/safety.md).
fn guards(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    args::<Empty>(payload)?;
    Done::reply(&super::envelope::guards_reply(ctx.engine.payload()))
}

/// A run's phase as the wire says it: its state, when it is due, and
/// whether the step it waits for is durable.
fn phase_of(phase: RunPhase) -> (RunState, Option<i64>, Option<bool>) {
    match phase {
        RunPhase::Waiting { due_ms, durable } => (RunState::Waiting, Some(due_ms), Some(durable)),
        RunPhase::Gap { due_ms } => (RunState::RepeatGap, Some(due_ms), None),
        RunPhase::WaitingForRoom { due_ms } => (RunState::WaitingForRoom, Some(due_ms), Some(true)),
        RunPhase::Acting => (RunState::Acting, None, None),
        RunPhase::Draining => (RunState::Draining, None, None),
    }
}

pub(super) fn no_rule(engine: &Engine, name: &str) -> String {
    let names: Vec<&str> = engine.payload().rules.iter().map(|r| &*r.name).collect();
    match rulecore::suggest::did_you_mean(name, &names) {
        Some(near) => format!("the bundle has no rule `{name}`; did you mean `{near}`?"),
        None => format!("the bundle has no rule `{name}`"),
    }
}

fn test(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let TestRequest { name, event } = args(payload)?;
    let bytes = serde_json::to_vec(&event).map_err(|e| format!("event: {e}"))?;
    let event = Event::decode(&bytes).map_err(|e| format!("`event` is not an event: {e}"))?;
    let dry = ctx
        .engine
        .dry_run(&name, &event, ctx.now)
        .ok_or_else(|| no_rule(ctx.engine, &name))?;
    let index = ctx.engine.rule_index(&name).unwrap_or_default();
    let payload = ctx.engine.payload();
    let rule = &payload.rules[index];
    let mut reply = dry_run_reply(&dry, rule);
    // docs/safety.md#guards: the guards of each covered step, judged by
    // the server on a fresh read before it replies.
    let probe = super::guard_probe::Probe::of(payload, rule, &mut reply.steps);
    let mut done = Done::reply(&reply)?;
    done.probe = probe;
    Ok(done)
}

fn when_of(when: Option<&WhenResult>) -> Option<When> {
    when.map(|when| match when {
        WhenResult::True => When::Result(true),
        WhenResult::False => When::Result(false),
        WhenResult::Error(error) => When::Error {
            error: error.to_string(),
        },
    })
}

/// What a judged `when` read; empty without one.
fn when_read(check: Option<&WhenCheck>) -> Vec<rulecore::vm::Read> {
    check.map(|check| check.reads.clone()).unwrap_or_default()
}

/// `lsc`'s reading of a `when` (docs/operating.md#the-fields-lsc-reads):
/// `condition`, since `lsc` prints it as a bool and reads a missing one as
/// `false`: `true` without a `when` (the step would run), the `when`'s
/// result, `false` when it failed.
fn lsc_condition(when: Option<&WhenResult>) -> bool {
    matches!(when, None | Some(WhenResult::True))
}

/// The `when`'s error (a string), only when it failed.
fn when_error(when: Option<&WhenResult>) -> Option<String> {
    match when {
        Some(WhenResult::Error(error)) => Some(error.to_string()),
        _ => None,
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
) -> StepLine {
    let description = spec.map(|spec| {
        let said = super::definition::describe(&spec.action);
        if finally {
            format!("finally: {said}")
        } else {
            said
        }
    });
    let when = check.when.as_ref().map(|check| &check.result);
    StepLine {
        index,
        kind: spec.map(|spec| super::definition::kind(&spec.action).to_string()),
        description,
        durable: check.durable,
        after: go_duration_ms(check.after_ms),
        after_ms: check.after_ms,
        when: when_of(when),
        when_read: when_read(check.when.as_ref()),
        finally,
        finally_index: finally.then_some(check.index),
        condition: lsc_condition(when),
        error: when_error(when),
        guard: None,
    }
}

/// The rule's steps, then its finally steps (numbered on after them, as
/// `lsc` lists one sequence).
fn step_lines(dry: &DryRun, rule: &rulecore::bundle::Rule) -> Vec<StepLine> {
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

fn dry_run_reply(dry: &DryRun, rule: &rulecore::bundle::Rule) -> TestReply {
    let repeat = rule.repeat();
    let when = dry.when.as_ref().map(|check| &check.result);
    TestReply {
        // What `lsc ext test` reads (docs/operating.md#the-fields-lsc-reads).
        name: dry.rule.to_string(),
        enabled: dry.enabled,
        matched: dry.matched,
        note: verdict_note(&dry.verdict),
        repeat_count: repeat.count,
        repeat_every: go_duration_ns(repeat.every_ns),
        cooldown: go_duration_ns(rule.cooldown_ns()),
        debounce: go_duration_ns(rule.debounce_ns()),
        // Ours.
        rule: dry.rule.to_string(),
        cancels: dry.cancels,
        when: when_of(when),
        when_read: when_read(dry.when.as_ref()),
        steps: step_lines(dry, rule),
        verdict: verdict_of(&dry.verdict),
        error: when_error(when).map(|error| format!("when: {error}")),
    }
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

/// The engine's verdict on the wire.
fn verdict_of(verdict: &Verdict) -> protocol::Verdict {
    use protocol::Verdict as Wire;
    match *verdict {
        Verdict::Disabled => Wire::Disabled,
        Verdict::NotMatched => Wire::NotMatched,
        Verdict::WhenFalse => Wire::WhenFalse,
        Verdict::WhenError => Wire::WhenError,
        Verdict::Hold { for_ms } => Wire::Hold { for_ms },
        Verdict::Holding { for_ms, left_ms } => Wire::Holding { for_ms, left_ms },
        Verdict::HoldFired => Wire::HoldFired,
        Verdict::Debounce { window_ms } => Wire::Debounce { window_ms },
        Verdict::Cooldown { left_ms } => Wire::Cooldown { left_ms },
        Verdict::Start => Wire::Start,
        Verdict::Restart { ref run } => Wire::Restart {
            run: run.to_string(),
        },
        Verdict::Drop { ref run } => Wire::Drop {
            run: run.to_string(),
        },
        Verdict::Queue { position } => Wire::Queue { position },
        Verdict::Refused { backlog } => Wire::Refused { backlog },
    }
}

fn pending(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let page = args::<Page>(payload)?.checked()?;
    let waiting = ctx.engine.waiting_steps(ctx.now);
    let steps = waiting
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .map(|step: &WaitingStep| PendingStep {
            run: step.run.to_string(),
            rule: step.rule.to_string(),
            step: step.step,
            pass: step.pass,
            due: step.due_ms,
            durable: step.durable,
            finally: step.finally,
        })
        .collect();
    // Running holds (`for`): not steps, but what the rule waits for.
    let running = ctx.engine.running_holds(ctx.now);
    let holds = running
        .iter()
        .take(MAX_LIMIT)
        .map(|hold| PendingHold {
            rule: hold.rule.to_string(),
            due: hold.due_ms,
            left_ms: hold.left_ms,
        })
        .collect();
    Done::reply(&PendingReply {
        total: waiting.len(),
        offset: page.offset,
        limit: page.limit,
        steps,
        holds,
        holds_total: running.len(),
    })
}

fn set_enabled(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let SetEnabledRequest {
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
    let reply = SetEnabledReply {
        // `lsc`'s mutation reply (docs/operating.md#the-fields-lsc-reads).
        name: name.clone(),
        revision: revision(&ctx.facts).to_string(),
        pending_restart: false,
        message: set_enabled_message(enabled, changed, live_run.as_deref()),
        // Ours.
        enabled: Some(enabled),
        changed,
        override_state: None,
        removed: None,
        live_run,
    };
    Ok(Done {
        payload: encoded(&reply)?,
        keep: Some((name, Some(enabled))),
        probe: None,
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

/// `v1.trace {name?, offset?, limit?}`: one rule's traces, or every traced
/// rule's (docs/semantics.md#traces); `{"traces": [...]}` either way, with
/// `total`, `offset` and `limit`. With a name the page is over the rule's
/// runs (oldest first; its last non-fire on every page), so a trace too
/// long for one reply is read page by page; without, over the traced rules.
fn trace(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let TraceRequest {
        name,
        offset,
        limit,
    } = args(payload)?;
    let page = Page { offset, limit }.checked()?;
    let paged = if name.is_some() {
        Paged::Runs
    } else {
        Paged::Rules
    };
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
    Done::reply(&TraceReply {
        traces,
        paged,
        total,
        offset: page.offset,
        limit: page.limit,
    })
}

/// `v1.emit {topic, from?, to?, data?}` (docs/operating.md#handing-the-rules-an-event):
/// the event handed to the rules through the bus's path, never published;
/// logged at `warn` with its topic, refused or not.
fn emit(ctx: &mut Context<'_>, payload: &Value) -> Result<Done, String> {
    let outcome = hand_in(ctx, payload);
    let topic = field_of(payload, "topic");
    match &outcome {
        Ok(reply) => tracing::warn!(
            topic = %topic,
            signed = ctx.signed,
            matched = reply.matched_total,
            started = reply.started,
            "control request v1.emit: event handed to the rules"
        ),
        Err(why) => tracing::warn!(
            topic = %topic,
            signed = ctx.signed,
            "control request v1.emit refused: {why}"
        ),
    }
    Done::reply(&outcome?)
}

/// The request read as an event by the bus's decoder, its topic judged by
/// the trust rule ([`super::trust::unsigned_may_emit`]), then handled.
fn hand_in(ctx: &mut Context<'_>, payload: &Value) -> Result<EmitReply, String> {
    let request: EmitRequest = args(payload)?;
    if request.topic.is_empty() || request.topic.len() > crate::subscriptions::MAX_TOPIC_BYTES {
        return Err(format!(
            "`topic` must be 1 to {} bytes, as on the bus",
            crate::subscriptions::MAX_TOPIC_BYTES
        ));
    }
    // Stamped now, as a publisher's `ts`; no id (ids are the stream's).
    let mut envelope = serde_json::to_value(&request).map_err(|e| format!("event: {e}"))?;
    envelope["ts"] = Value::from(ctx.now.wall_ms);
    let bytes = serde_json::to_vec(&envelope).map_err(|e| format!("event: {e}"))?;
    let event = Event::decode(&bytes).map_err(|e| format!("not an event: {e}"))?;
    if !ctx.signed {
        super::trust::unsigned_may_emit(ctx.engine, &event.topic).map_err(|e| e.to_string())?;
    }
    let (decided, matched_total) = ctx.engine.operator_event(ctx.now, event, EMIT_SHOWN);
    let matched: Vec<Matched> = decided
        .iter()
        .map(|decided| Matched {
            rule: decided.rule.to_string(),
            verdict: verdict_of(&decided.verdict),
            run: decided.run.as_ref().map(ToString::to_string),
            when: when_of(decided.when.as_ref().map(|check| &check.result)),
            when_read: when_read(decided.when.as_ref()),
        })
        .collect();
    Ok(EmitReply {
        topic: request.topic,
        started: matched.iter().filter(|m| m.run.is_some()).count(),
        matched,
        matched_total,
    })
}
