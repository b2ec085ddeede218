//! Replay at start (docs/semantics.md#durability-and-replay): the pending
//! records a previous process left, judged (rule, step, fingerprint, the
//! replay window), one kept per rule by its concurrency policy, and
//! resumed as runs under their own ids; the rest removed with a reason.

use crate::fast_hash::hash_text;
use crate::keyed::Focus;
use crate::record::{self, ReplayAction};
use crate::time::nanos_to_millis_ceil;
use crate::{
    DropReason, Effect, Engine, Level, LogLine, Note, Now, PendingRecord, RecordError, Replay,
    ReplayDropReason,
};
use rulecore::bundle::{Concurrency, Payload, Rule, Step};
use std::sync::Arc;

/// The replay checks that need no clock, in replay's order
/// (docs/semantics.md#durability-and-replay): the record's rule (`None`:
/// gone), its step, the step's fingerprint (`same_fingerprint`), and
/// whether `ruled` could have written it at all. `rulec diff` asks the same
/// of a deploy.
pub fn refusal_without_clock(
    rule: Option<&Rule>,
    step: u32,
    iter: u32,
    same_fingerprint: impl FnOnce(usize, &Step) -> bool,
) -> Option<ReplayDropReason> {
    if let Some(reason) = step_refusal(rule, step, same_fingerprint) {
        return Some(reason);
    }
    let (Some(rule), Some(spec)) = (rule, rule.and_then(|rule| rule.steps.get(step as usize)))
    else {
        return Some(ReplayDropReason::StepGone);
    };
    // Only a durable wait writes a record, on a pass the rule makes.
    if spec.after_ns == 0 || !spec.durable || iter >= rule.repeat().count {
        return Some(ReplayDropReason::NeverWritten);
    }
    None
}

/// Whether a step still stands in a bundle, the first three replay checks
/// (docs/semantics.md#durability-and-replay): the rule (`None`: gone), a
/// step at that index, and the same fingerprint (`same_fingerprint`). A
/// live reload asks the same of every live run
/// (docs/semantics.md#live-reload).
pub fn step_refusal(
    rule: Option<&Rule>,
    step: u32,
    same_fingerprint: impl FnOnce(usize, &Step) -> bool,
) -> Option<ReplayDropReason> {
    let Some(rule) = rule else {
        return Some(ReplayDropReason::RuleGone);
    };
    let index = step as usize;
    let Some(spec) = rule.steps.get(index) else {
        return Some(ReplayDropReason::StepGone);
    };
    if !same_fingerprint(index, spec) {
        return Some(ReplayDropReason::Fingerprint);
    }
    None
}

impl Engine {
    /// Replay from raw hash fields (`field`, stored value), each decoded by
    /// [`PendingRecord::decode_field`], the one decoding of a stored record
    /// (docs/semantics.md#durability-and-replay); the service decodes as it
    /// reads and calls [`Engine::replay`]. A value that is not a
    /// record of its own run is logged once, with its
    /// [`RecordError::code`], and removed ([`DropReason::Undecodable`]);
    /// the rest go to [`Engine::replay`].
    pub fn replay_raw(&mut self, now: Now, fields: Vec<(String, Vec<u8>)>) {
        if self.stopped || self.records.replayed() {
            // Leave every field alone; `replay` says why.
            return self.replay(now, Vec::new());
        }
        let mut records = Vec::with_capacity(fields.len());
        for (field, value) in fields {
            match PendingRecord::decode_field(&field, &value) {
                Ok(record) => records.push(record),
                Err(error) => {
                    let reason = match &error {
                        RecordError::Foreign { .. } => DropReason::Foreign,
                        _ => DropReason::Undecodable,
                    };
                    // The one report of the removal; the `DropRecord`
                    // below is not logged again.
                    self.effects.push_back(Effect::Log(LogLine {
                        level: Level::Warn,
                        rule: None,
                        step: None,
                        finally: false,
                        run: Some(field.as_str().into()),
                        code: Some(error.code()),
                        message: format!("removing pending record {field:?}: {error}"),
                    }));
                    self.effects.push_back(Effect::DropRecord {
                        id: field.into(),
                        rule: None,
                        reason,
                    });
                }
            }
        }
        self.replay(now, records);
    }

    /// Replay (docs/semantics.md#durability-and-replay): call once at start, after loading and before
    /// the first event. Records are taken earliest `fire-at` first, ties by
    /// id; invalid ones are removed with a reason; each rule's concurrency
    /// policy picks among the rest; the survivors resume under their own ids.
    pub fn replay(&mut self, now: Now, records: Vec<PendingRecord>) {
        if let Some(mut replay) = self.replay_start(now, records) {
            while self.replay_next(&mut replay, usize::MAX) {}
        }
    }

    /// [`Engine::replay`] a part at a time, so the caller can take each
    /// part's effects and notes ([`Engine::poll_effect`]) before the next
    /// part makes more: with 10,000 records, the notes of every resumed
    /// run queued at once are over a megabyte. Decides everything at once
    /// (validity, which record each rule's policy keeps) in the same
    /// (fire-at, id) order, so the outcome and the order of every note and
    /// effect are [`Engine::replay`]'s; then [`Engine::replay_next`] acts
    /// on the records in that order. `None` when there is nothing to do
    /// (stopped, or replay already called: logged, as [`Engine::replay`]).
    pub fn replay_start(&mut self, now: Now, mut records: Vec<PendingRecord>) -> Option<Replay> {
        if self.stopped {
            return None;
        }
        if self.records.replay_again() {
            // Replay is once, at start (docs/semantics.md#durability-and-replay): records seen later
            // belong to this process's own runs.
            self.log(
                Level::Error,
                None,
                None,
                "replay called twice; the second call is ignored".to_string(),
            );
            return None;
        }
        // Ids are unique (hash fields), so an unstable sort gives the same
        // order without a scratch buffer the size of the records.
        records.sort_unstable_by(|a, b| a.fire_at.cmp(&b.fire_at).then_with(|| a.id.cmp(&b.id)));
        let window = self.config.replay_window_ms.max(0);
        let payload = Arc::clone(&self.payload);
        // Two passes over the same (fire-at, id) order: the first only
        // decides (validity, then which record each rule's policy keeps),
        // the second acts, so every note and effect comes out in fire-at
        // order (docs/semantics.md#durability-and-replay) whatever the outcome of each record.
        // Deciding holds 16 to 32 bytes a record beside the records (their
        // rule names' hashes and their rules, then their actions and the
        // resumed ones' rules): with 10,000
        // records, the two hash maps and the vectors of verdicts and kept
        // flags it held before were some 1.3 MB at once, on top of every
        // record, and set `ruled`'s peak (docs/engine.md#the-48-mb-box).
        let mut actions: Vec<ReplayAction> = rules_of(&payload, &records)
            .into_iter()
            .zip(&records)
            .map(|(rule, record)| {
                let Some(rule) = rule else {
                    return ReplayAction::Remove(ReplayDropReason::RuleGone);
                };
                match self.replay_refusal(rule, record, now.wall_ms, window) {
                    Some(reason) => ReplayAction::Remove(reason),
                    None => ReplayAction::Resume(rule),
                }
            })
            .collect();
        keep_by_policy(&payload, &records, &mut actions);
        // Taken from the end: each part's records are freed as it is
        // acted on (see `replay_next`).
        records.reverse();
        actions.reverse();
        Some(Replay {
            now,
            records,
            actions,
        })
    }

    /// What replay would refuse of `records` before looking at a clock
    /// ([`refusal_without_clock`]: rule, step, fingerprint, never written),
    /// one answer per record in their order. The service's pending read
    /// removes such records as it reads them, so junk never counts against
    /// the replay budget (docs/service.md#what-ruled-reads-and-its-bounds).
    pub fn refusals_without_clock(
        &self,
        records: &[PendingRecord],
    ) -> Vec<Option<ReplayDropReason>> {
        rules_of(&self.payload, records)
            .into_iter()
            .zip(records)
            .map(|(rule, record)| {
                let rule = rule.and_then(|index| self.payload.rules.get(index));
                let same = |_: usize, step: &Step| {
                    record::same_fingerprint(&record.fingerprint, &step.fingerprint)
                };
                refusal_without_clock(rule, record.step, record.iter, same)
            })
            .collect()
    }

    /// Acts on the next `count` records of `replay` (resume or remove, in
    /// the order [`Engine::replay_start`] decided); returns whether any
    /// are left.
    pub fn replay_next(&mut self, replay: &mut Replay, count: usize) -> bool {
        let now = replay.now;
        for _ in 0..count {
            let (Some(record), Some(action)) = (replay.records.pop(), replay.actions.pop()) else {
                return false;
            };
            match action {
                ReplayAction::Resume(rule) => self.resume(rule, record, now),
                ReplayAction::Remove(reason) => self.replay_drop(&record, reason),
            }
        }
        // The acted-on part's room goes back (in place, no copy) while the
        // runs it made take theirs: the records and the runs they become
        // are never all held twice.
        replay.records.shrink_to_fit();
        replay.actions.shrink_to_fit();
        !replay.records.is_empty()
    }

    /// Why replay must remove `record` of `rule`, checked in the order of
    /// docs/semantics.md#durability-and-replay; `None` when it may resume.
    pub(crate) fn replay_refusal(
        &self,
        rule: usize,
        record: &PendingRecord,
        wall_ms: i64,
        window: i64,
    ) -> Option<ReplayDropReason> {
        let spec = &self.payload.rules[rule];
        let same = |_: usize, step: &Step| {
            record::same_fingerprint(&record.fingerprint, &step.fingerprint)
        };
        if let Some(reason) = refusal_without_clock(Some(spec), record.step, record.iter, same) {
            return Some(reason);
        }
        let Some(step) = spec.steps.get(record.step as usize) else {
            return Some(ReplayDropReason::StepGone);
        };
        if wall_ms.saturating_sub(record.fire_at) > window {
            return Some(ReplayDropReason::TooLate);
        }
        if record.fire_at.saturating_sub(wall_ms) > nanos_to_millis_ceil(step.after_ns) {
            // The clock went backwards.
            return Some(ReplayDropReason::TooEarly);
        }
        None
    }

    pub(crate) fn replay_drop(&mut self, record: &PendingRecord, reason: ReplayDropReason) {
        let id: Arc<str> = record.id.as_str().into();
        let rule: Arc<str> = record.rule.as_str().into();
        // The note is the one report of this removal; drivers word it with
        // `ReplayDropReason::describe`.
        self.note(Note::ReplayDrop {
            id: Arc::clone(&id),
            rule: Arc::clone(&rule),
            step: record.step,
            pass: record.iter,
            reason,
        });
        self.effects.push_back(Effect::DropRecord {
            id,
            rule: Some(rule),
            reason: DropReason::Replay(reason),
        });
    }

    /// A replayed record resumes as a run under its own id, on its pass:
    /// overdue steps run now, others wait out what is left.
    pub(crate) fn resume(&mut self, rule: usize, record: PendingRecord, now: Now) {
        // A keyed rule's run goes back on its key (an old record without
        // one: the empty key).
        if self.payload.rules[rule].per().is_some() {
            let key: Arc<str> = record.key.as_deref().unwrap_or("").into();
            if self.focus_key(rule, &key, true, now) != Focus::Ready {
                self.replay_drop(&record, ReplayDropReason::Concurrency);
                return;
            }
        }
        if self.rules.run(rule).is_some() {
            // Replay after events: the live run wins; the record is dropped.
            self.replay_drop(&record, ReplayDropReason::Concurrency);
            return;
        }
        let id: Arc<str> = record.id.into();
        self.rules.install(
            rule,
            Arc::clone(&id),
            Arc::new(record.event),
            record.step,
            record.iter,
        );
        let name = self.name(rule);
        self.note(Note::ReplayResume {
            run: id,
            rule: name,
            step: record.step,
            pass: record.iter,
            fire_at: record.fire_at,
        });
        if let Some(run) = self.rules.run_mut(rule) {
            run.owns_record = true;
            run.fire_at = record.fire_at;
            run.pass_start = now.time;
        }
        self.trace_run_started(rule, now, true, crate::why::KeptReads::NONE);
        let left_ms = record.fire_at.saturating_sub(now.wall_ms);
        if left_ms <= 0 {
            self.submit_step(rule, now);
        } else {
            let left_ns = u64::try_from(left_ms)
                .unwrap_or(0)
                .saturating_mul(1_000_000);
            // Only a durable wait leaves a record to resume.
            self.wait_until(rule, now.time.plus_nanos(left_ns), true, now);
        }
    }
}

/// The position in `payload` of each record's rule (the first of that
/// name), `None` for a rule it does not have. Found through the records'
/// name hashes, sorted, searched for each rule's name: no map of the names
/// (with 100,000 rules and a few records, a map of every rule would be
/// megabytes; with 10,000 records, a map of theirs was half a megabyte at
/// replay's peak), 16 bytes a record, and whole names compared only where
/// the hashes are equal (sorting the records' positions by name instead,
/// string comparisons through an index, made replaying 10,000 records a
/// quarter slower: docs/engine.md#where-the-replays-growth-went).
fn rules_of(payload: &Payload, records: &[PendingRecord]) -> Vec<Option<usize>> {
    let mut by_hash: Vec<(u64, u32)> = records
        .iter()
        .zip(0u32..)
        .map(|(record, at)| (hash_text(&record.rule), at))
        .collect();
    by_hash.sort_unstable();
    let mut rules = vec![None; records.len()];
    for (index, rule) in payload.rules.iter().enumerate() {
        let name = &*rule.name;
        let hash = hash_text(name);
        let first = by_hash.partition_point(|&(h, _)| h < hash);
        for &(_, at) in by_hash[first..].iter().take_while(|&&(h, _)| h == hash) {
            let at = at as usize;
            if records[at].rule == name {
                // A second rule of the same name (never in a verified
                // bundle) finds the first's records taken.
                rules[at].get_or_insert(index);
            }
        }
    }
    rules
}

/// Turns the resumed records each rule's concurrency policy does not keep
/// into removals (`Concurrency`): it keeps one per rule, or per rule and
/// key for a keyed rule (docs/rules.md#keyed-runs), `restart` the later
/// record, `drop` and `queue` the first. `actions` are in the records'
/// (fire-at, id) order; the resumed ones are grouped by sorting their
/// positions, so nothing but those positions is held.
fn keep_by_policy(payload: &Payload, records: &[PendingRecord], actions: &mut [ReplayAction]) {
    let rule_of = |action: ReplayAction| match action {
        ReplayAction::Resume(rule) => Some(rule),
        ReplayAction::Remove(_) => None,
    };
    // By rule, then position: integers only, the rule read from the
    // action; a keyed rule's records are grouped by key in a second step.
    let mut resumed: Vec<(usize, usize)> = actions
        .iter()
        .enumerate()
        .filter_map(|(position, &action)| rule_of(action).map(|rule| (rule, position)))
        .collect();
    resumed.sort_unstable();
    for same_rule in resumed.chunk_by_mut(|a, b| a.0 == b.0) {
        let spec = &payload.rules[same_rule[0].0];
        if spec.per().is_some() {
            let key = |position: usize| records[position].key.as_deref();
            same_rule.sort_unstable_by(|a, b| key(a.1).cmp(&key(b.1)).then(a.1.cmp(&b.1)));
            for group in same_rule.chunk_by(|a, b| key(a.1) == key(b.1)) {
                keep_one(spec.concurrency, group, actions);
            }
        } else {
            keep_one(spec.concurrency, same_rule, actions);
        }
    }
}

/// Of `group`, one rule's (or key's) resumed records as (rule, position)
/// in position order, keeps the one its policy keeps and removes the rest.
fn keep_one(policy: Concurrency, group: &[(usize, usize)], actions: &mut [ReplayAction]) {
    let winner = match policy {
        Concurrency::Restart => group.last(),
        Concurrency::Drop | Concurrency::Queue => group.first(),
    };
    let winner = winner.map(|&(_, position)| position);
    for &(_, position) in group {
        if Some(position) != winner {
            actions[position] = ReplayAction::Remove(ReplayDropReason::Concurrency);
        }
    }
}
