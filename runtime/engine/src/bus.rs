//! The bus profile at run time (docs/sources.md): the engine's side of
//! what [`crate::derive`] defines. The values it reads are the state
//! shadow's; the events it derives are dispatched to the rules at once
//! and handed to the service to publish ([`Effect::Publish`]); polls are
//! timers like the runs' ([`Effect::Poll`]).

use crate::derive::{BusMode, Derive, FieldChange, Notified, PollPlan, ReadCause};
use crate::effect::Effect;
use crate::time::{Now, Time};
use crate::Engine;
use rulecore::bundle::Payload;
use rulecore::event::Event;

/// What the engine keeps for the profile.
#[derive(Debug, Default)]
pub(crate) struct BusState {
    pub(crate) derive: Derive,
    /// Per watched pair: whether the field holds a value (seeded, or read
    /// since); `false` is absent, which a first value is compared with.
    pub(crate) present: Vec<bool>,
    /// The live polls and when each is next due (`Time::ZERO`: at once).
    polls: Vec<(PollPlan, Time)>,
    /// The last event id given out: Unix ms and a sequence within it, as
    /// stream entry ids are.
    pub(crate) last_id: (i64, u64),
    /// Pairs before this index (state pairs and inputs' fields) are
    /// always watched; the profile's after it only while live.
    always: usize,
}

impl BusState {
    pub(crate) fn new(
        payload: &std::sync::Arc<Payload>,
        engine: &crate::EngineConfig,
        inputs: &crate::input::Inputs,
    ) -> Self {
        let watched = inputs.watched();
        let mut derive = Derive::new(payload, watched, engine.bus, engine.sources);
        derive.follow_rules(payload, |rule| payload.rules[rule].enabled);
        let polls = derive
            .polls(payload, watched, |rule| payload.rules[rule].enabled)
            .into_iter()
            .map(|poll| (poll, Time::ZERO))
            .collect();
        BusState {
            derive,
            present: vec![false; watched.len()],
            polls,
            last_id: (0, 0),
            always: inputs.own_pairs(),
        }
    }

    /// The next event id at `wall_ms`: above every id given out before.
    fn next_id(&mut self, wall_ms: i64) -> String {
        let (ms, seq) = self.last_id;
        self.last_id = if wall_ms > ms {
            (wall_ms, 0)
        } else {
            (ms, seq + 1)
        };
        format!("{}-{}", self.last_id.0, self.last_id.1)
    }
}

impl Engine {
    /// `--bus own` or `follow` (docs/service.md#the-bus).
    pub fn bus_mode(&self) -> BusMode {
        self.bus.derive.mode()
    }

    /// The bundle's profile: its name and digest.
    pub fn profile(&self) -> Option<(&str, &str)> {
        self.bus
            .derive
            .profile()
            .map(|profile| (profile.name.as_str(), profile.digest.as_str()))
    }

    /// Whether an event on `ev:<topic>` must not reach a rule: an owned
    /// topic (derived here) or an `input.*` one (made only by its input),
    /// docs/sources.md#owned-topics.
    pub fn refuses_from_bus(&self, topic: &str) -> bool {
        topic.starts_with("input.") || self.bus.derive.owns(topic)
    }

    /// The owned topics, sorted (none in `follow` mode).
    pub fn owned_topics(&self) -> Vec<&str> {
        self.bus.derive.owned().collect()
    }

    /// The watched pairs the service seeds, re-reads and keeps current
    /// now: the bundle's state pairs and inputs' fields, then the live
    /// sources' fields and the live polls' (indices into
    /// [`Engine::watched_pairs`], ascending).
    pub fn live_pairs(&self) -> Vec<usize> {
        let polled = |index: usize| {
            self.bus
                .polls
                .iter()
                .any(|(poll, _)| poll.pairs.contains(&index))
        };
        (0..self.inputs.watched().len())
            .filter(|&index| {
                index < self.bus.always || self.bus.derive.watches(index) || polled(index)
            })
            .collect()
    }

    /// The hashes whose channel must be subscribed: those of the live
    /// pairs, sorted and distinct, polled-only hashes left out.
    pub fn watched_hashes(&self) -> Vec<&str> {
        let watched = self.inputs.watched();
        let mut hashes: Vec<&str> = (0..watched.len())
            .filter(|&index| index < self.bus.always || self.bus.derive.watches(index))
            .map(|index| watched[index].hash.as_str())
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        hashes
    }

    /// The shadow's value of a watched pair (`""` while absent).
    pub fn state_value(&self, hash: &str, field: &str) -> Option<&str> {
        let index = self.inputs.index(hash, field)?;
        self.state.get(index).map(String::as_str)
    }

    /// The live polls.
    pub fn polls(&self) -> Vec<&PollPlan> {
        self.bus.polls.iter().map(|(poll, _)| poll).collect()
    }

    /// What to do with `PUBLISH <hash> <payload>` (docs/sources.md#changes).
    pub fn notified(&self, hash: &str, payload: &str) -> Notified {
        let live = self.live_pairs();
        match self
            .bus
            .derive
            .notified(hash, payload, |hash, field| self.inputs.index(hash, field))
        {
            Notified::Read(pairs) if !live.contains(&pairs[0]) => Notified::Ignore,
            other => other,
        }
    }

    /// Values read from the datastore (`None`: the field is absent).
    /// With [`ReadCause::Notified`] the first is the notified field and
    /// the rest are read with it (applied first, emitting nothing of
    /// their own); otherwise each is a change of its own. Every value
    /// feeds `state()` before anything derived from it is dispatched;
    /// inputs over a pair make their events as
    /// [`Engine::field_changed`] does.
    pub fn fields_read(&mut self, now: Now, cause: ReadCause, values: &[(usize, Option<String>)]) {
        let split = usize::from(cause == ReadCause::Notified && !values.is_empty());
        let (first, rest) = values.split_at(split);
        let mut derived = Vec::new();
        for (index, value) in rest {
            let own = if cause == ReadCause::Notified {
                None
            } else {
                Some(ReadCause::Reread)
            };
            self.field_read(now, *index, value.as_deref(), own, &mut derived);
        }
        for (index, value) in first {
            self.field_read(now, *index, value.as_deref(), Some(cause), &mut derived);
        }
        self.dispatch_derived(now, derived);
    }

    /// `PUBLISH <hash> cleared`: the hash's watched fields are absent now;
    /// nothing is emitted (docs/sources.md#changes).
    pub fn hash_cleared(&mut self, hash: &str) {
        let pairs = self.bus.derive.cleared(hash).to_vec();
        for index in pairs {
            if let Some(slot) = self.state.get_mut(index) {
                slot.clear();
                self.bus.present[index] = false;
                self.hold_state_changed(index);
            }
        }
    }

    /// The newest entry id of stream `events` at start: ids given out
    /// from here on are above it.
    pub fn set_bus_floor(&mut self, ms: i64, seq: u64) {
        if (ms, seq) > self.bus.last_id {
            self.bus.last_id = (ms, seq);
        }
    }

    /// One pair's new value: stored, then its input events and (when
    /// `derive` is given) the events its live sources derive, collected
    /// in `derived`.
    fn field_read(
        &mut self,
        now: Now,
        index: usize,
        value: Option<&str>,
        derive: Option<ReadCause>,
        derived: &mut Vec<Event>,
    ) {
        let Some(slot) = self.state.get_mut(index) else {
            return;
        };
        let old = std::mem::replace(slot, value.unwrap_or_default().to_string());
        let was = std::mem::replace(&mut self.bus.present[index], value.is_some());
        self.hold_state_changed(index);
        if let Some(cause) = derive {
            let change = FieldChange {
                pair: index,
                old: was.then_some(old.as_str()),
                new: value,
                cause,
            };
            let (state, present) = (&self.state, &self.bus.present);
            derived.extend(self.bus.derive.field_events(
                change,
                &self.payload.consts,
                state,
                |pair| {
                    present
                        .get(pair)
                        .copied()
                        .unwrap_or(false)
                        .then(|| state[pair].clone())
                },
            ));
        }
        let events = self.inputs.hash_events(index, &old, &self.state[index]);
        for event in events {
            self.handle_event(now, event);
        }
    }

    /// The events a channel source derives from one message.
    pub(crate) fn channel_derived(&mut self, now: Now, channel: &str, payload: &[u8]) {
        let events =
            self.bus
                .derive
                .channel_events(channel, payload, &self.payload.consts, &self.state);
        self.dispatch_derived(now, events);
    }

    /// Gives each derived event its id and time, hands it to the rules,
    /// then to the service to publish, all of one change in one effect.
    fn dispatch_derived(&mut self, now: Now, mut events: Vec<Event>) {
        if events.is_empty() || self.stopped {
            return;
        }
        for event in &mut events {
            event.id = Some(self.bus.next_id(now.wall_ms).as_str().into());
            event.ts = Some(now.wall_ms);
        }
        for event in &events {
            self.handle_event(now, event.clone());
        }
        self.effects.push_back(Effect::Publish(events));
    }

    /// The live channel sources' channels, sorted.
    pub(crate) fn source_channels(&self) -> impl Iterator<Item = &str> + '_ {
        self.bus.derive.channels()
    }

    /// Rules turned on or off: the live sources and polls follow.
    pub(crate) fn bus_follow_rules(&mut self) {
        let payload = std::sync::Arc::clone(&self.payload);
        let states = &self.rules;
        self.bus
            .derive
            .follow_rules(&payload, |rule| states[rule].enabled);
        let polls = self
            .bus
            .derive
            .polls(&payload, self.inputs.watched(), |rule| states[rule].enabled);
        let old = std::mem::take(&mut self.bus.polls);
        self.bus.polls = polls
            .into_iter()
            .map(|poll| {
                let due = old
                    .iter()
                    .find(|(known, _)| *known == poll)
                    .map_or(Time::ZERO, |(_, due)| *due);
                (poll, due)
            })
            .collect();
    }

    /// When the next poll is due.
    pub(crate) fn poll_deadline(&self) -> Option<Time> {
        self.bus.polls.iter().map(|(_, due)| *due).min()
    }

    /// Asks for the polls due at `now` and schedules their next turn.
    pub(crate) fn polls_due(&mut self, now: Now) {
        for (poll, due) in &mut self.bus.polls {
            if *due <= now.time {
                *due = now.time.plus_nanos(poll.every_ns);
                self.effects.push_back(Effect::Poll {
                    hash: poll.hash.clone(),
                    pairs: poll.pairs.clone(),
                });
            }
        }
    }
}
