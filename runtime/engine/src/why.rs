//! Why, not only what (docs/semantics.md#what-a-when-read): a `when`'s
//! result with the values it read, for the dry run, traces and the
//! simulator's `--explain`. Asked for only there: the event path judges a
//! rule by its plan and never lists reads unless a trace keeps the
//! evaluation or the engine explains (`EngineConfig::explain`).

use crate::decide::WhenResult;
use crate::{Engine, NonFireReason, Note, Now};
use rulecore::bytecode::Program;
use rulecore::event::Event;
use rulecore::vm::{self, Read, ReadContext};
use std::sync::Arc;

/// A `when` judged, and what it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhenCheck {
    pub result: WhenResult,
    /// In the order the condition first names them; see [`Read`].
    pub reads: Vec<Read>,
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
        let explained = vm::explain(program, event, &self.read_context());
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

    /// What `program` reads in `event` and the current state (the result
    /// already known: the event path's own evaluation).
    pub(crate) fn when_reads(&self, program: &Program, event: &Event) -> Vec<Read> {
        vm::reads(program, event, &self.read_context())
    }

    fn read_context(&self) -> ReadContext<'_> {
        ReadContext {
            consts: &self.payload.consts,
            pairs: &self.payload.state_pairs,
            state: &self.state,
            present: &self.bus.present,
        }
    }
}

impl Engine {
    /// A matching event that started no run: traced and, explaining,
    /// noted; `reads` (what the `when` read) only for `when-false` and
    /// `when-error`, empty otherwise.
    pub(crate) fn non_fire_reading(
        &mut self,
        rule: usize,
        reason: NonFireReason,
        event: &Arc<Event>,
        now: Now,
        error: Option<&str>,
        reads: Vec<Read>,
    ) {
        let noted = self.config.explain.then(|| reads.clone());
        self.traces
            .non_fire(rule, now.time, event, reason, error, reads);
        if let Some(reads) = noted {
            let rule = self.name(rule);
            self.note(Note::NonFire {
                rule,
                reason,
                reads,
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
        let reads = if self.wants_reads() {
            self.when_reads(program, event)
        } else {
            Vec::new()
        };
        self.non_fire_reading(rule, reason, event, now, error, reads);
    }
}
