//! Why, not only what (docs/semantics.md#what-a-when-read): a `when`'s
//! result with the values it read, for the dry run, traces and the
//! simulator's `--explain`. Asked for only there: the event path judges a
//! rule by its plan and never lists reads unless a trace keeps the
//! evaluation or the engine explains (`EngineConfig::explain`).
//!
//! A trace keeps little at the time
//! (docs/decisions.md#what-a-when-read-looked-up-beside-the-evaluation-not-by-it-issue-31):
//! the `state()` values the `when` read ([`KeptReads`]), since the
//! event is in the trace already; the reads are listed from both when the
//! trace is viewed.

use crate::decide::WhenResult;
use crate::{Engine, NonFireReason, Note, Now, Time};
use rulecore::bundle::{Payload, StatePair};
use rulecore::bytecode::{Const, Program};
use rulecore::event::Event;
use rulecore::vm::{self, Captured, Read, ReadContext, StateValues};
use std::sync::Arc;

/// A `when` judged, and what it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhenCheck {
    pub result: WhenResult,
    /// In the order the condition first names them; see [`Read`].
    pub reads: Vec<Read>,
}

/// What a trace keeps of a `when`'s reads: one pointer, nothing
/// allocated when no `when` was judged (most run records).
#[derive(Debug, Default)]
pub(crate) struct KeptReads(Option<Box<Kept>>);

#[derive(Debug)]
enum Kept {
    /// The `state()` values it read; the event's values are looked up in
    /// the traced event when the trace is viewed.
    State(Box<[Captured]>),
    /// Listed whole: the event was too large for the trace to keep, or
    /// the bundle the `when` belonged to was replaced.
    Listed(Box<[Read]>),
}

impl KeptReads {
    /// Nothing: no `when` judged here, or traces are off.
    pub(crate) const NONE: Self = Self(None);

    fn state(captured: Box<[Captured]>) -> Self {
        Self(Some(Box::new(Kept::State(captured))))
    }

    fn listed(reads: Vec<Read>) -> Self {
        Self(Some(Box::new(Kept::Listed(reads.into_boxed_slice()))))
    }

    pub(crate) fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Heap bytes held (for a trace's budget).
    pub(crate) fn heap(&self) -> usize {
        let Some(kept) = &self.0 else {
            return 0;
        };
        std::mem::size_of::<Kept>()
            + match &**kept {
                Kept::State(captured) => {
                    std::mem::size_of_val(&**captured)
                        + captured
                            .iter()
                            .map(|c| c.value.as_ref().map_or(0, |v| v.len()))
                            .sum::<usize>()
                }
                Kept::Listed(reads) => {
                    std::mem::size_of_val(&**reads) + reads.iter().map(Read::heap).sum::<usize>()
                }
            }
    }

    /// The reads, listed from `program` (the `when` that was judged) and
    /// the traced `event`; empty when either is missing.
    pub(crate) fn list(
        &self,
        program: Option<&Program>,
        event: Option<&Event>,
        tables: (&[Const], &[StatePair]),
    ) -> Vec<Read> {
        match (self.0.as_deref(), program, event) {
            (Some(Kept::Listed(reads)), _, _) => reads.to_vec(),
            (Some(Kept::State(captured)), Some(program), Some(event)) => {
                let context = ReadContext {
                    consts: tables.0,
                    pairs: tables.1,
                    state: StateValues::Captured(captured),
                };
                vm::reads(program, event, &context)
            }
            _ => Vec::new(),
        }
    }

    /// Listed whole now, while `payload` is the bundle the `when` was
    /// judged by (before a reload replaces it).
    pub(crate) fn settle(
        &mut self,
        payload: &Payload,
        program: Option<&Program>,
        event: Option<&Event>,
    ) {
        if let Some(Kept::State(_)) = self.0.as_deref() {
            let tables = (&payload.consts[..], &payload.state_pairs[..]);
            *self = Self::listed(self.list(program, event, tables));
        }
    }
}

/// The rule `when` the current event was found true by, and its reads,
/// until the decision that follows takes them (a run's start, or a
/// non-fire such as `cooldown` or `hold-pending`).
#[derive(Debug)]
pub(crate) struct Judged {
    rule: usize,
    /// For the note, when explaining.
    noted: Vec<Read>,
    /// For the trace.
    kept: KeptReads,
}

impl Engine {
    /// Whether an evaluation's reads are kept somewhere: a trace, or an
    /// explained output line.
    pub(crate) fn wants_reads(&self) -> bool {
        self.config.explain || self.traces.enabled()
    }

    /// Judges `program` against `event` and the current state by the
    /// bytecode VM, and lists what it read.
    pub(crate) fn explain_when(&self, program: &Program, event: &Event) -> WhenCheck {
        let payload = &self.payload;
        let shadow = (&self.state[..], &self.bus.present[..]);
        let explained = vm::explain(
            program,
            event,
            &payload.consts,
            &payload.state_pairs,
            shadow,
        );
        let result = match explained.result {
            Ok(true) => WhenResult::True,
            Ok(false) => WhenResult::False,
            Err(error) => WhenResult::Error(error.to_string().into()),
        };
        WhenCheck {
            result,
            reads: explained.reads,
        }
    }

    /// What `program` reads in `event` and the current state, for a note
    /// (the result already known: the event path's own evaluation); empty
    /// unless explaining.
    pub(crate) fn noted_reads(&self, program: &Program, event: &Event) -> Vec<Read> {
        if !self.config.explain {
            return Vec::new();
        }
        vm::reads(program, event, &self.shadow_context())
    }

    /// The reads' context: the bundle's tables and the state shadow now.
    fn shadow_context(&self) -> ReadContext<'_> {
        ReadContext {
            consts: &self.payload.consts,
            pairs: &self.payload.state_pairs,
            state: StateValues::Shadow {
                values: &self.state,
                present: &self.bus.present,
            },
        }
    }

    /// What a trace keeps of `program`'s reads in `event` now: the
    /// `state()` values only, unless the event is too large for the trace
    /// to keep whole; nothing with traces off.
    pub(crate) fn kept_reads(&self, program: &Program, event: &Event) -> KeptReads {
        if !self.traces.enabled() {
            return KeptReads::NONE;
        }
        if crate::trace::kept_whole(event) {
            let captured = vm::capture_state(program, &self.state, &self.bus.present);
            return KeptReads::state(captured);
        }
        KeptReads::listed(vm::reads(program, event, &self.shadow_context()))
    }

    /// Rule `rule`'s `when` was true for `event`: its reads wait for the
    /// decision that follows (see [`Judged`]).
    pub(crate) fn judged_true(&mut self, rule: usize, program: &Program, event: &Event) {
        if self.wants_reads() {
            let noted = self.noted_reads(program, event);
            let kept = self.kept_reads(program, event);
            self.scratch.judged = Some(Judged { rule, noted, kept });
        }
    }

    /// The reads of `rule`'s `when` found true for the current event, for
    /// the note and the trace of the decision; empty when it was not.
    pub(crate) fn take_judged(&mut self, rule: usize) -> (Vec<Read>, KeptReads) {
        match self.scratch.judged.take() {
            Some(judged) if judged.rule == rule => (judged.noted, judged.kept),
            _ => (Vec::new(), KeptReads::NONE),
        }
    }
}

impl Engine {
    /// A matching event that started no run: traced and, explaining,
    /// noted, each with what the rule's `when` read when it was judged
    /// for it (`noted` for the note, `kept` for the trace).
    pub(crate) fn non_fire_reading(
        &mut self,
        rule: usize,
        reason: NonFireReason,
        event: &Arc<Event>,
        at: Time,
        error: Option<&str>,
        (noted, kept): (Vec<Read>, KeptReads),
    ) {
        self.traces.non_fire(rule, at, event, reason, error, kept);
        if self.config.explain {
            let rule = self.name(rule);
            self.note(Note::NonFire {
                rule,
                reason,
                reads: noted,
            });
        }
    }

    /// The rule's own `when` was false or failed for `event`: a non-fire
    /// with what it read, when the reads are kept somewhere.
    pub(crate) fn when_not_met(
        &mut self,
        rule: usize,
        program: &Program,
        event: &Arc<Event>,
        now: Now,
        error: Option<&str>,
    ) {
        let reason = match error {
            Some(_) => NonFireReason::WhenError,
            None => NonFireReason::WhenFalse,
        };
        let reads = (
            self.noted_reads(program, event),
            self.kept_reads(program, event),
        );
        self.non_fire_reading(rule, reason, event, now.time, error, reads);
    }
}
