//! Guards at the moment of the action (docs/safety.md#guards): which guards
//! cover a job ([`GuardCheck`], made at hand-over; none for an unguarded
//! action, which then pays nothing), the one judgement of the values read
//! fresh ([`judge`]: the service's workers and the simulator's virtual pool
//! both call it), and the engine's side of a refusal
//! ([`Engine::action_guarded`]): the run ends `guarded`, counted, one `warn`
//! line, a trace line, and the guard's `say` as a toast.

use crate::{Effect, EndReason, Engine, JobId, Level, LogLine, Now};
use rulecore::bundle::{Action, Notification, Payload, Severity, Text, NOTIFY_CHANNEL};
use rulecore::envelope::Cover;
use rulecore::event::Event;

/// The guards covering one job, and the fields their fresh read asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardCheck {
    /// Indices into the bundle's guards, in order.
    pub guards: Vec<u32>,
    /// The `(hash, field)` pairs every one of them reads, distinct, as
    /// indices into the bundle's `state_pairs`: what the worker reads.
    pub pairs: Vec<u32>,
}

impl GuardCheck {
    /// The guards of `payload` covering `action` (its computed form),
    /// `None` when no guard does.
    pub fn of(payload: &Payload, action: &Action) -> Option<Box<GuardCheck>> {
        if payload.envelope.guards.is_empty() {
            return None;
        }
        let value = covered_value(action);
        Self::covering(payload, |cover| cover.covers(action, value)).map(Box::new)
    }

    /// The guards of `payload` whose cover `covers` accepts, and the pairs
    /// they read; `None` when none is. [`GuardCheck::of`] asks of one
    /// computed action; the dry run asks of a step whose value is not
    /// computed yet.
    pub fn covering(payload: &Payload, covers: impl Fn(&Cover) -> bool) -> Option<GuardCheck> {
        let mut check = GuardCheck {
            guards: Vec::new(),
            pairs: Vec::new(),
        };
        for (index, guard) in payload.envelope.guards.iter().enumerate() {
            if !covers(&guard.cover) {
                continue;
            }
            check.guards.push(u32::try_from(index).unwrap_or(u32::MAX));
            for pair in &guard.reads {
                if !check.pairs.contains(pair) {
                    check.pairs.push(*pair);
                }
            }
        }
        (!check.guards.is_empty()).then_some(check)
    }

    /// The `(hash, field)` names of [`GuardCheck::pairs`], in order.
    pub fn fields<'a>(&'a self, payload: &'a Payload) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.pairs.iter().filter_map(|&pair| {
            let pair = payload.state_pairs.get(pair as usize)?;
            Some((pair.hash.as_str(), pair.field.as_str()))
        })
    }
}

/// Per state pair of `payload`, whether only guards read it
/// (docs/safety.md#guards): no rule's program (`when`, `per`, a step's
/// `when` or computed value), no profile's and no input reads it. The
/// service neither subscribes to such a pair's hash nor keeps it current
/// for guards alone: a guard reads its fields fresh at the action. Empty
/// when the bundle has no guards.
pub(crate) fn guard_only_pairs(payload: &Payload) -> Vec<bool> {
    use rulecore::bytecode::{Op, Program};
    if payload.envelope.guards.is_empty() {
        return Vec::new();
    }
    let count = payload.state_pairs.len();
    let mut read = vec![false; count];
    let mut mark = |program: &Program| {
        for op in &program.ops {
            if let Some(slot) = match op {
                Op::State(index) => read.get_mut(*index as usize),
                _ => None,
            } {
                *slot = true;
            }
        }
    };
    for rule in &payload.rules {
        rule.when.iter().for_each(|when| mark(when));
        rule.per().into_iter().for_each(&mut mark);
        for step in rule.steps.iter().chain(rule.finally()) {
            step.when.iter().for_each(&mut mark);
            step.action
                .texts()
                .flat_map(Text::programs)
                .for_each(&mut mark);
        }
    }
    for emit in payload
        .profile
        .iter()
        .flat_map(|profile| &profile.sources)
        .flat_map(|source| &source.emits)
    {
        emit.when.iter().for_each(&mut mark);
        for spec in emit.data.iter().map(|(_, spec)| spec) {
            if let rulecore::profile::DataSpec::Expr(program) = spec {
                mark(program);
            }
        }
    }
    for input in &payload.inputs {
        if let rulecore::bundle::InputSource::Hash { hash, fields } = &input.source {
            for (slot, pair) in read.iter_mut().zip(&payload.state_pairs) {
                *slot |= pair.hash == *hash && fields.contains(&pair.field);
            }
        }
    }
    let mut only = vec![false; count];
    for guard in &payload.envelope.guards {
        for &pair in &guard.reads {
            let pair = pair as usize;
            if let (Some(slot), Some(false)) = (only.get_mut(pair), read.get(pair)) {
                *slot = true;
            }
        }
    }
    only
}

/// The value a guard's `values` are matched against: a push or a publish's
/// message (plain; a computed one is the job's computed action).
pub fn covered_value(action: &Action) -> &str {
    match action {
        Action::Redis {
            push: Text::Plain(value),
            ..
        }
        | Action::Publish {
            message: Text::Plain(value),
            ..
        } => value,
        _ => "",
    }
}

/// What one field of the fresh read gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Value(String),
    /// The field (or its hash) is not there.
    Absent,
    /// The read failed, or the value was over its bound or not UTF-8.
    Unreadable,
}

impl Read {
    /// The field `name` (`hash field`) as read, as the `warn` line and
    /// the dry run say it: `engine-ecu speed = "6"`, `engine-ecu speed
    /// absent`, `... unreadable`.
    pub fn text(&self, name: &str) -> String {
        match self {
            Read::Value(value) => format!("{name} = {value:?}"),
            Read::Absent => format!("{name} absent"),
            Read::Unreadable => format!("{name} unreadable"),
        }
    }
}

/// Why a guard refused an action, with the state it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub guard: String,
    /// Each field the guard reads, as `hash field = value` (or `absent`,
    /// `unreadable`).
    pub read: Vec<String>,
    /// The guard's `say`, if it has one.
    pub say: Option<String>,
}

impl Refusal {
    /// `vehicle state = "ready-to-drive", engine-ecu speed = absent`.
    pub fn state_text(&self) -> String {
        self.read.join(", ")
    }
}

/// Judges `check`'s guards on the fresh read `values` (one per
/// [`GuardCheck::pairs`], in order): `Ok` when every guard holds; else the
/// first that does not. A field absent or unreadable makes a guard reading
/// it false, as an evaluation error does: the envelope fails closed.
pub fn judge(payload: &Payload, check: &GuardCheck, values: &[Read]) -> Result<(), Refusal> {
    let mut state = vec![String::new(); payload.state_pairs.len()];
    for (pair, read) in check.pairs.iter().zip(values) {
        if let (Some(slot), Read::Value(value)) = (state.get_mut(*pair as usize), read) {
            slot.clone_from(value);
        }
    }
    let read_of = |pair: u32| {
        check
            .pairs
            .iter()
            .position(|p| *p == pair)
            .and_then(|at| values.get(at))
            .unwrap_or(&Read::Unreadable)
    };
    let no_event = Event::default();
    for &index in &check.guards {
        let Some(guard) = payload.envelope.guards.get(index as usize) else {
            continue;
        };
        let all_read = guard
            .reads
            .iter()
            .all(|&pair| matches!(read_of(pair), Read::Value(_)));
        let holds = all_read
            && rulecore::vm::eval_bool(&guard.when, &payload.consts, &no_event, &state)
                .unwrap_or(false);
        if !holds {
            let read = guard
                .reads
                .iter()
                .map(|&pair| {
                    let name = payload
                        .state_pairs
                        .get(pair as usize)
                        .map_or_else(String::new, |p| format!("{} {}", p.hash, p.field));
                    read_of(pair).text(&name)
                })
                .collect();
            return Err(Refusal {
                guard: guard.name.clone(),
                read,
                say: guard.say.clone(),
            });
        }
    }
    Ok(())
}

/// The toast a refusal shows (source `rules`, severity `warning`, id = the
/// guard's name), as the publish a worker performs.
pub(crate) fn toast(id: &str, say: &str) -> Option<Action> {
    let notification = Notification {
        id: id.to_string(),
        title: Text::Plain("Refused".into()),
        body: Text::Plain(say.into()),
        severity: Severity::Warning,
        ttl_ms: 5_000,
        dismiss: false,
        timeout_ns: rulecore::bundle::DEFAULT_TIMEOUT_NS,
    };
    let (message, _) = notification.message("Refused", say)?;
    Some(Action::Publish {
        channel: NOTIFY_CHANNEL.to_string(),
        message: Text::Plain(message),
        timeout_ns: rulecore::bundle::DEFAULT_TIMEOUT_NS,
    })
}

impl Engine {
    /// A worker read a job's guard fields and a guard refused: the action
    /// was not performed. The run ends `guarded` (its finally steps do not
    /// run, as after a failure); counted, logged once through the log
    /// budget, traced, and the guard's `say` shown.
    pub fn action_guarded(&mut self, now: Now, job: JobId, refusal: Refusal) {
        let owner = self.rules.job_done(job);
        let rule = owner.map(|owner| owner.rule as usize);
        self.envelope
            .count(crate::envelope_state::Refusal::Guarded, rule);
        self.counters.guarded += 1;
        let name = rule.and_then(|rule| self.rule_name(rule));
        self.effects.push_back(Effect::Log(LogLine {
            level: Level::Warn,
            rule: name.clone(),
            step: owner.map(|owner| owner.step),
            finally: owner.is_some_and(|owner| owner.finally),
            run: None,
            code: Some("guarded"),
            message: format!(
                "action refused by guard `{}`: {}",
                refusal.guard,
                refusal.state_text()
            ),
        }));
        if let Some(say) = &refusal.say {
            self.submit_toast(&refusal.guard, say);
        }
        let Some(owner) = owner else {
            return;
        };
        let rule = owner.rule as usize;
        let outcome = format!("guarded by {}", refusal.guard);
        self.traces
            .step_finished(rule, owner.serial, owner.at(), now.time, Err(&outcome));
        let live =
            self.is_acting(rule, owner.serial, job) || self.is_draining(rule, owner.serial, job);
        if !self.stopped && live {
            self.end_run(rule, EndReason::Guarded, now);
        }
    }

    /// A toast for a refusal (docs/safety.md): the driver publishes it.
    pub(crate) fn submit_toast(&mut self, id: &str, say: &str) {
        if let Some(Action::Publish {
            channel,
            message: Text::Plain(message),
            ..
        }) = toast(id, say)
        {
            self.effects.push_back(Effect::Toast { channel, message });
        }
    }
}

#[cfg(test)]
mod tests;
