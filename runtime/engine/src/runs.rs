//! The runs part of the engine: each rule's slot (its live run, held
//! debounce, hold, queue and statistics, [`RuleState`]), the jobs handed
//! to the pool and not yet finished, and the numbering of jobs, runs and
//! run serials. The event path indexes a slot by bundle position
//! (`rules[rule]` in the engine, docs/engine.md#the-48-mb-box); the rest of the engine
//! asks this part for a rule's run, starts one, hands its step over as a
//! job and learns whose a finished job was.

use crate::fast_hash::FastMap;
use crate::rule_state::RuleState;
use crate::run_id::Ids;
use crate::{JobId, JobOwner, Phase, Run, Time};
use rulecore::bundle::Payload;
use rulecore::event::Event;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct Runs {
    /// One per rule, in bundle order; a keyed rule's other keys' states
    /// are `keyed`'s.
    slots: Vec<RuleState>,
    /// Jobs handed over and not yet finished.
    jobs: FastMap<u64, JobOwner>,
    /// Job, run and serial numbers, and the run ids made from them.
    ids: Ids,
}

impl Runs {
    /// Every rule idle, on or off as its bundle says.
    pub fn new(payload: &Payload) -> Self {
        Self {
            slots: payload
                .rules
                .iter()
                .map(|rule| RuleState::idle(rule.enabled))
                .collect(),
            jobs: FastMap::default(),
            ids: Ids::default(),
        }
    }

    /// How many rules (slots).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Rule `rule`'s slot, `None` out of range.
    pub fn get(&self, rule: usize) -> Option<&RuleState> {
        self.slots.get(rule)
    }

    /// Every slot, in bundle order.
    pub fn slots(&self) -> std::slice::Iter<'_, RuleState> {
        self.slots.iter()
    }

    /// Whether rule `rule` is on now.
    pub fn is_enabled(&self, rule: usize) -> bool {
        self.slots.get(rule).is_some_and(|state| state.enabled)
    }

    /// Rule `rule`'s name as its notes and effects share it, made the
    /// first time one needs it (see [`RuleState::name`]).
    pub fn name(&mut self, rule: usize, payload: &Payload) -> Arc<str> {
        let state = &mut self.slots[rule];
        Arc::clone(
            state
                .name
                .get_or_insert_with(|| (&*payload.rules[rule].name).into()),
        )
    }

    /// [`Runs::name`] for a caller that cannot keep it (a view): made
    /// anew when the rule has not needed it yet, empty out of range.
    pub fn name_of(&self, rule: usize, payload: &Payload) -> Arc<str> {
        match self.slots.get(rule).and_then(|state| state.name.as_ref()) {
            Some(name) => Arc::clone(name),
            None => payload
                .rules
                .get(rule)
                .map_or_else(|| "".into(), |spec| (&*spec.name).into()),
        }
    }

    /// Turns rule `rule` on or off; whether that changed it.
    pub fn set_enabled(&mut self, rule: usize, enabled: bool) -> bool {
        let state = &mut self.slots[rule];
        let changed = state.enabled != enabled;
        state.enabled = enabled;
        changed
    }

    /// Puts `incoming` (one key's state, docs/rules.md#keyed-runs) in rule
    /// `rule`'s slot and returns the state it held. The rule's own parts,
    /// on or off and its name, stay with the slot, not with a key.
    pub fn swap_state(&mut self, rule: usize, mut incoming: RuleState) -> RuleState {
        let slot = &mut self.slots[rule];
        incoming.enabled = slot.enabled;
        incoming.name = slot.name.take();
        std::mem::replace(slot, incoming)
    }

    /// Rule `rule`'s slot left with a fresh state; returns the one it held.
    pub fn take_state(&mut self, rule: usize) -> RuleState {
        self.swap_state(rule, RuleState::idle(false))
    }

    /// The live run in rule `rule`'s slot.
    pub fn run(&self, rule: usize) -> Option<&Run> {
        self.slots.get(rule)?.run.as_deref()
    }

    pub fn run_mut(&mut self, rule: usize) -> Option<&mut Run> {
        self.slots.get_mut(rule)?.run.as_deref_mut()
    }

    /// The live run leaves rule `rule`'s slot (it ends, or moves).
    pub fn take_run(&mut self, rule: usize) -> Option<Box<Run>> {
        self.slots[rule].run.take()
    }

    /// Stop (docs/service.md#start-and-stop) for rule `rule`'s slot: its
    /// backlog, debounce window and hold dropped, its live run taken out.
    pub fn stop(&mut self, rule: usize) -> Option<Box<Run>> {
        let state = &mut self.slots[rule];
        state.drop_waiting();
        state.run.take()
    }

    /// The id of a new run of rule `name`: `<name>#<epoch>-<n>`.
    pub fn next_run_id(&mut self, name: &str, epoch: &str) -> Arc<str> {
        self.ids.next_run_id(name, epoch)
    }

    /// A new run in rule `rule`'s slot, at `step` of pass `pass`, deciding;
    /// counted in the rule's runs started.
    pub fn install(&mut self, rule: usize, id: Arc<str>, event: Arc<Event>, step: u32, pass: u32) {
        let serial = self.ids.next_serial();
        let state = &mut self.slots[rule];
        state.runs_started += 1;
        state.run = Some(Box::new(Run {
            serial,
            id,
            event,
            step,
            pass,
            finally: false,
            phase: Phase::Deciding,
            owns_record: false,
            fire_at: 0,
            retries: 0,
            pass_start: Time::ZERO,
        }));
    }

    /// Rule `rule`'s live run hands its current step to the pool as a new
    /// job: the run acts, and the job takes over the run's record. Returns
    /// the job's number, the run, and whether the job owns a record.
    pub fn make_job(&mut self, rule: usize) -> Option<(u64, &mut Run, bool)> {
        let job = self.ids.next_job();
        let run = self.slots.get_mut(rule)?.run.as_deref_mut()?;
        run.phase = Phase::Acting { job };
        // The record is removed when the action starts, and kept if it
        // never does (docs/semantics.md#durability-and-replay).
        let record = std::mem::take(&mut run.owns_record);
        let owner = JobOwner {
            rule: rule as u32,
            serial: run.serial,
            step: run.step,
            record,
            pass: run.pass,
            finally: run.finally,
        };
        self.jobs.insert(job, owner);
        Some((job, run, record))
    }

    /// Whose job `job` is, while it is not finished.
    pub fn job(&self, job: JobId) -> Option<&JobOwner> {
        self.jobs.get(&job.0)
    }

    /// Job `job` finished (or was refused, guarded, abandoned): whose it was.
    pub fn job_done(&mut self, job: JobId) -> Option<JobOwner> {
        self.jobs.remove(&job.0)
    }

    /// A reload: `next` (the new bundle's runs) takes over the numbering
    /// and the jobs not finished, each under its rule's new position
    /// (`targets`, by old position); a removed rule's jobs are forgotten.
    pub fn carry_jobs_into(&mut self, next: &mut Runs, targets: &[Option<usize>]) {
        next.jobs = self
            .jobs
            .drain()
            .filter_map(|(job, owner)| {
                let target = targets.get(owner.rule as usize).copied().flatten()?;
                let rule = u32::try_from(target).ok()?;
                Some((job, JobOwner { rule, ..owner }))
            })
            .collect();
        next.ids = std::mem::take(&mut self.ids);
    }
}

impl Index<usize> for Runs {
    type Output = RuleState;

    fn index(&self, rule: usize) -> &RuleState {
        &self.slots[rule]
    }
}

impl IndexMut<usize> for Runs {
    fn index_mut(&mut self, rule: usize) -> &mut RuleState {
        &mut self.slots[rule]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` rules `r0`, `r1` ..., none with steps.
    fn payload(count: usize) -> Payload {
        let rule = |i| rulecore::bundle::Rule::new(format!("r{i}"), "t.toml", vec![], vec![]);
        Payload::new("test", (0..count).map(rule).collect(), vec![], vec![])
    }

    #[test]
    fn a_job_takes_its_runs_record_and_a_reload_moves_it_with_its_rule() {
        let mut runs = Runs::new(&payload(3));
        assert!(runs.make_job(1).is_none(), "no run, no job");
        let id = runs.next_run_id("r1", "7");
        runs.install(1, id, Arc::new(Event::default()), 0, 0);
        let Some(run) = runs.run_mut(1) else {
            panic!("installed");
        };
        run.owns_record = true;
        let Some((job, run, record)) = runs.make_job(1) else {
            panic!("a live run makes a job");
        };
        assert!(record && !run.owns_record && run.phase == Phase::Acting { job });
        // The job number taken for rule 1's missing run is not reused.
        assert_eq!(job, 2);
        assert_eq!(runs.job(JobId(job)).map(|owner| owner.rule), Some(1));
        let mut next = Runs::new(&payload(2));
        runs.carry_jobs_into(&mut next, &[None, Some(0), Some(1)]);
        assert_eq!(next.job_done(JobId(job)).map(|owner| owner.rule), Some(0));
        assert!(next.job_done(JobId(job)).is_none(), "done once");
        assert_eq!(next.next_run_id("r0", "7").as_ref(), "r0#7-2");
    }

    #[test]
    fn a_keys_state_swaps_in_and_the_rules_own_parts_stay() {
        let payload = payload(1);
        let mut runs = Runs::new(&payload);
        let name = runs.name(0, &payload);
        assert!(runs.set_enabled(0, false) && !runs.set_enabled(0, false));
        let mut key = RuleState::idle(true);
        key.runs_started = 5;
        let out = runs.swap_state(0, key);
        assert_eq!(out.runs_started, 0);
        assert!(!runs.is_enabled(0) && runs[0].runs_started == 5);
        assert!(Arc::ptr_eq(&runs.name_of(0, &payload), &name));
        assert_eq!(runs.take_state(0).runs_started, 5);
        assert!(!runs.is_enabled(0));
    }
}
