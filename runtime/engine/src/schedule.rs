//! Schedules (docs/rules.md#schedules): a rule's `at` times and `every`
//! period fire it as an event only that rule sees (`time.at`,
//! `time.every`, `data.at` the scheduled local time). Local time comes
//! from the [`LocalZone`] the driver hands in; the wall clock from
//! [`Now`]. A fire missed while the service was down runs once at start
//! when it is less than the replay window late; a jump of the wall clock
//! forward over a fire runs it once, a jump back repeats none.

mod local_time;

pub use local_time::{
    last_fire, next_fire, unix_of_civil, Fire, FireKind, LocalZone, ZoneError, ZONEINFO_DIRS,
};

use crate::{Effect, Engine, Level, NonFireReason, Now, Time};
use rulecore::bundle::Payload;
use rulecore::schedule::{fire_event, time_of_day_label, Schedule};
use std::collections::HashMap;
use std::sync::Arc;

/// What `ruled ctl status` shows of one schedule key of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleView {
    pub rule: Arc<str>,
    /// `time.at` or `time.every`.
    pub topic: &'static str,
    /// The next fire, Unix ms.
    pub next_fire_ms: i64,
    /// Its `data.at`.
    pub at: String,
}

/// One key (`at` or `every`) of one scheduled rule, waiting for its next fire.
#[derive(Debug, Clone)]
struct Slot {
    rule: u32,
    kind: FireKind,
    next: Fire,
    /// `next` on the engine's monotonic clock, as the wall clock stood
    /// when it was armed.
    deadline: Time,
}

/// The schedules' part of the engine.
#[derive(Debug, Default)]
pub(crate) struct Schedules {
    zone: Option<LocalZone>,
    slots: Vec<Slot>,
    /// Each rule's last fire, Unix ms, by name (what `NS:schedule` keeps).
    last: HashMap<Arc<str>, i64>,
    /// The wall clock jumped: every slot is judged again at the next timeout.
    jumped: bool,
}

impl Schedules {
    fn zone(&self) -> LocalZone {
        self.zone.clone().unwrap_or_else(LocalZone::utc)
    }
}

fn deadline_for(now: Now, fire: Fire) -> Time {
    let wait_ms = fire.unix_s.saturating_mul(1000).saturating_sub(now.wall_ms);
    let wait_ns = u64::try_from(wait_ms)
        .unwrap_or(0)
        .saturating_mul(1_000_000);
    now.time.plus_nanos(wait_ns)
}

impl Engine {
    /// The local time zone schedules read (default UTC). Set it before
    /// [`Engine::start_schedules`]; the driver reads it from the system.
    pub fn set_zone(&mut self, zone: LocalZone) {
        self.schedules.zone = Some(zone);
    }

    /// The zone schedules read.
    pub fn zone_name(&self) -> String {
        self.schedules.zone().name().to_string()
    }

    /// Arms every scheduled rule's next fire, at start after replay.
    /// `last_fires`: each rule's last fire (Unix ms) as `NS:schedule`
    /// kept it. A fire missed since then runs once now when it is less
    /// than the replay window late, otherwise it is skipped with a line.
    pub fn start_schedules(&mut self, now: Now, last_fires: &[(String, i64)]) {
        if self.stopped {
            return;
        }
        self.schedules.last = last_fires
            .iter()
            .map(|(rule, ms)| (Arc::from(rule.as_str()), *ms))
            .collect();
        self.arm_schedules(now);
        self.baseline_schedules(now);
        let payload = Arc::clone(&self.payload);
        let zone = self.schedules.zone();
        let now_s = now.wall_ms.div_euclid(1000);
        let window_ms = self.config.replay_window_ms.max(0);
        for index in 0..self.schedules.slots.len() {
            let slot = self.schedules.slots[index].clone();
            let rule = slot.rule as usize;
            let Some(schedule) = payload.rules[rule].schedule() else {
                continue;
            };
            let Some(&last_ms) = self.schedules.last.get(&*payload.rules[rule].name) else {
                continue;
            };
            let Some(missed) = last_fire(&zone, schedule, slot.kind, now_s)
                .filter(|fire| fire.unix_s.saturating_mul(1000) > last_ms)
            else {
                continue;
            };
            let late_ms = now
                .wall_ms
                .saturating_sub(missed.unix_s.saturating_mul(1000));
            let name = self.name(rule);
            let label = time_of_day_label(missed.at_s);
            if late_ms <= window_ms {
                self.log(
                    Level::Info,
                    Some(name),
                    None,
                    format!(
                        "schedule: the {} fire of {label} was missed while ruled was down \
                         ({late_ms} ms ago, within the replay window): it runs now",
                        slot.kind.topic()
                    ),
                );
                self.fire(rule, slot.kind, missed, now);
            } else {
                self.log(
                    Level::Warn,
                    Some(name),
                    None,
                    format!(
                        "schedule: the {} fire of {label} was missed while ruled was down \
                         ({late_ms} ms ago, more than the replay window of {window_ms} ms): skipped",
                        slot.kind.topic()
                    ),
                );
            }
        }
    }

    /// The next schedule fire on the engine's clock, if any rule has one
    /// (the driver sleeps until the earlier of this and
    /// [`Engine::next_deadline`]).
    pub fn next_schedule(&self) -> Option<Time> {
        if self.stopped {
            return None;
        }
        let earliest = self
            .schedules
            .slots
            .iter()
            .map(|slot| slot.deadline)
            .min()?;
        // After a jump, at once: the slots are judged on the new clock.
        Some(if self.schedules.jumped {
            Time::ZERO
        } else {
            earliest
        })
    }

    /// Each schedule key's next fire, in bundle order (`ruled ctl status`).
    pub fn schedules(&self) -> Vec<ScheduleView> {
        let mut views: Vec<ScheduleView> = self
            .schedules
            .slots
            .iter()
            .map(|slot| ScheduleView {
                rule: self.name_of(slot.rule as usize),
                topic: slot.kind.topic(),
                next_fire_ms: slot.next.unix_s.saturating_mul(1000),
                at: time_of_day_label(slot.next.at_s),
            })
            .collect();
        views.sort_by_key(|view| view.next_fire_ms);
        views
    }

    /// Fires the schedules due at `now`, from [`Engine::handle_timeout`].
    pub(crate) fn schedules_due(&mut self, now: Now) {
        let jumped = std::mem::take(&mut self.schedules.jumped);
        let zone = self.schedules.zone();
        let payload = Arc::clone(&self.payload);
        let now_s = now.wall_ms.div_euclid(1000);
        for index in 0..self.schedules.slots.len() {
            let slot = self.schedules.slots[index].clone();
            let Some(schedule) = payload.rules[slot.rule as usize].schedule() else {
                continue;
            };
            let due = slot.next.unix_s.saturating_mul(1000) <= now.wall_ms;
            if !due && !jumped && slot.deadline > now.time {
                continue;
            }
            let mut next = slot.next;
            if due {
                // A jump forward over several fires runs the key once,
                // with the latest it passed.
                let fire = last_fire(&zone, schedule, slot.kind, now_s).unwrap_or(slot.next);
                self.fire(slot.rule as usize, slot.kind, fire, now);
                next = next_fire(&zone, schedule, slot.kind, now_s.max(fire.unix_s))
                    .unwrap_or(slot.next);
            } else if slot.next.unix_s - now_s > slot.kind.longest_gap_s(schedule) {
                // The clock went back by more than the key's longest gap:
                // start over from the new clock.
                next = next_fire(&zone, schedule, slot.kind, now_s).unwrap_or(slot.next);
            }
            // A smaller jump back keeps the next fire: none repeats.
            self.schedules.slots[index].next = next;
            self.schedules.slots[index].deadline = deadline_for(now, next);
        }
    }

    /// The wall clock jumped ([`Engine::clock_jumped`]): judge the slots again.
    pub(crate) fn schedules_clock_jumped(&mut self) {
        self.schedules.jumped = !self.schedules.slots.is_empty();
    }

    /// At stop: no more fires.
    pub(crate) fn schedules_stopped(&mut self) {
        self.schedules.slots.clear();
    }

    /// After a live reload (`old`: the schedules before it): the new
    /// bundle's keys armed, the zone and last fires kept; a new scheduled
    /// rule gets its baseline.
    pub(crate) fn schedules_reloaded(&mut self, old: Schedules, now: Now) {
        let started = !old.slots.is_empty() || !old.last.is_empty();
        self.schedules.zone = old.zone;
        self.schedules.last = old.last;
        if started {
            self.arm_schedules(now);
            self.baseline_schedules(now);
        }
    }

    /// Each scheduled rule with no last fire (never fired, or a Redis
    /// that lost `NS:schedule` across a reboot) gets `now` as its
    /// baseline, in the engine and in `NS:schedule`: a fire after it that
    /// is missed while the service is down runs at the next start (within
    /// the replay window), as for a rule that fired before.
    fn baseline_schedules(&mut self, now: Now) {
        for index in 0..self.schedules.slots.len() {
            let name = self.name_of(self.schedules.slots[index].rule as usize);
            if self.schedules.last.contains_key(&name) {
                continue;
            }
            self.schedules.last.insert(Arc::clone(&name), now.wall_ms);
            self.effects.push_back(Effect::ScheduleFired {
                rule: name,
                fire_ms: now.wall_ms,
            });
        }
    }

    /// One slot per key of every scheduled rule, armed for its next fire.
    fn arm_schedules(&mut self, now: Now) {
        let zone = self.schedules.zone();
        let now_s = now.wall_ms.div_euclid(1000);
        self.schedules.slots = slots(&self.payload, &zone, now_s, now);
    }

    /// Fires `rule`'s key `kind` for `fire`: the event to that rule only,
    /// judged like any trigger; the fire noted for `NS:schedule`.
    fn fire(&mut self, rule: usize, kind: FireKind, fire: Fire, now: Now) {
        let label = time_of_day_label(fire.at_s);
        let event = Arc::new(fire_event(kind.topic(), &label, now.wall_ms));
        if !self.rules.is_enabled(rule) {
            self.non_fire(rule, NonFireReason::RuleDisabled, &event, now, None);
            return;
        }
        let name = self.name(rule);
        let fire_ms = fire.unix_s.saturating_mul(1000);
        self.schedules.last.insert(Arc::clone(&name), fire_ms);
        self.effects.push_back(Effect::ScheduleFired {
            rule: name,
            fire_ms,
        });
        let payload = Arc::clone(&self.payload);
        self.match_rule(&payload.rules[rule], rule, &event, now, &mut |_, _| {});
    }
}

fn slots(payload: &Payload, zone: &LocalZone, now_s: i64, now: Now) -> Vec<Slot> {
    let mut slots = Vec::new();
    for (rule, spec) in payload.rules.iter().enumerate() {
        let Some(schedule) = spec.schedule() else {
            continue;
        };
        for kind in kinds(schedule) {
            if let Some(next) = next_fire(zone, schedule, kind, now_s) {
                slots.push(Slot {
                    rule: u32::try_from(rule).unwrap_or(u32::MAX),
                    kind,
                    next,
                    deadline: deadline_for(now, next),
                });
            }
        }
    }
    slots
}

fn kinds(schedule: &Schedule) -> impl Iterator<Item = FireKind> {
    let at = (!schedule.at.is_empty()).then_some(FireKind::At);
    let every = (schedule.every_s != 0).then_some(FireKind::Every);
    at.into_iter().chain(every)
}
