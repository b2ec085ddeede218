//! `per` (docs/rules.md#keyed-runs): the key that splits a rule's
//! policies, cooldown, debounce and holds, one `when`-language expression
//! of any type over the event, checked with spans inside the string. It
//! may not read `state()`: a key says which thing an event is about, and
//! the same event must always land on the same key (its durable records
//! carry it, and replay puts a run back on it).

use super::checker::RuleChecker;
use super::CheckedExpr;
use crate::diagnostic::{Code, Diagnostic};
use crate::rulefile::Table;
use crate::span::StringMap;
use crate::when::{self, Expr, ExprKind};
use std::ops::Range;

impl<'i> RuleChecker<'_, 'i> {
    /// `Ok(None)` when absent; `Err` once reported.
    pub(super) fn per(&mut self, table: &Table<'i>) -> Result<Option<CheckedExpr>, ()> {
        let Some((text, span)) = self.string_or_fail(table, "per")? else {
            return Ok(None);
        };
        let map = StringMap::new(&self.file.text, span.clone(), &text);
        if text.trim().is_empty() {
            self.push(
                Diagnostic::error(Code::Per, "`per` is empty")
                    .at(span, "no expression")
                    .with_help(
                        "write what the key is, e.g. `per = \"data.slot\"`, or remove `per`",
                    ),
            );
            return Err(());
        }
        let checked = match when::check_value(&text) {
            Ok(checked) => checked,
            Err(problems) => {
                for problem in problems {
                    let mut diagnostic = Diagnostic::error(problem.code, problem.message)
                        .at(map.map(problem.span), problem.label);
                    diagnostic.help = problem.help;
                    self.push(diagnostic);
                }
                return Err(());
            }
        };
        if let Some(state) = first_state_read(&checked.expr) {
            self.push(
                Diagnostic::error(Code::Per, "`per` reads `state()`")
                    .at(map.map(state), "state, not the event")
                    .with_help(
                        "a key says which thing the event is about, from the event alone \
                         (e.g. `data.slot`); test state in `when`",
                    ),
            );
            return Err(());
        }
        for warning in &checked.warnings {
            let mut diagnostic = Diagnostic::warning(warning.code, warning.message.clone())
                .at(map.map(warning.span.clone()), warning.label.clone());
            diagnostic.help = warning.help.clone();
            self.push(diagnostic);
        }
        if matches!(checked.expr.kind, ExprKind::Lit(_)) {
            self.push(
                Diagnostic::warning(
                    Code::PerConstant,
                    "`per` is a constant: every event has one key",
                )
                .at(span.clone(), "the same for every event")
                .with_help("key on something the event carries, e.g. `data.slot`, or remove `per`"),
            );
        }
        let expr = CheckedExpr {
            part: 0..text.len(),
            source: text,
            checked,
            span,
        };
        self.keep_expr(&expr);
        Ok(Some(expr))
    }
}

/// Where the first `state()` call is, in the expression's text.
fn first_state_read(expr: &Expr) -> Option<Range<usize>> {
    match &expr.kind {
        ExprKind::State(_) => Some(expr.span.clone()),
        ExprKind::Binary(_, left, right) => {
            first_state_read(left).or_else(|| first_state_read(right))
        }
        ExprKind::Call(_, args) => args.iter().find_map(first_state_read),
        ExprKind::Unary(_, inner) => first_state_read(inner),
        ExprKind::Lit(_) | ExprKind::Field(_) | ExprKind::Data(_) => None,
    }
}
