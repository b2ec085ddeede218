//! What a condition says for sure (docs/safety-checks.md#what-counts-as-exclusive):
//! the equality and membership tests of a `when` that must all hold,
//! read from its top-level `&&` parts. The conflict check asks whether two
//! conditions can both hold, the guard proof whether one implies another.
//! Anything else an expression says (`||`, orderings, arithmetic) is not a
//! fact: the checks only claim what these prove.

use crate::when::{BinOp, Expr, ExprKind, Lit, UnOp};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Builtin, EventField};
use std::collections::BTreeSet;
use std::fmt;

/// What a test reads: a field of the event, a `data` key, a `state()`
/// field, or `int()` of one of those.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    From,
    To,
    Data(Vec<String>),
    State(StatePair),
    Int(Box<Subject>),
}

impl Subject {
    fn of(expr: &Expr) -> Option<Subject> {
        match &expr.kind {
            ExprKind::Field(EventField::From) => Some(Subject::From),
            ExprKind::Field(EventField::To) => Some(Subject::To),
            ExprKind::Data(path) => Some(Subject::Data(path.clone())),
            ExprKind::State(pair) => Some(Subject::State(pair.clone())),
            ExprKind::Call(Builtin::Int, args) => match args.as_slice() {
                [inner] => Subject::of(inner)
                    .filter(|inner| !matches!(inner, Subject::Int(_)))
                    .map(|inner| Subject::Int(Box::new(inner))),
                _ => None,
            },
            _ => None,
        }
    }

    /// The `state()` pair it reads, if it reads one.
    pub fn state_pair(&self) -> Option<&StatePair> {
        match self {
            Subject::State(pair) => Some(pair),
            Subject::Int(inner) => inner.state_pair(),
            _ => None,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::From => f.write_str("from"),
            Subject::To => f.write_str("to"),
            Subject::Data(path) => write!(f, "data.{}", path.join(".")),
            Subject::State(pair) => write!(f, "state(\"{}\", \"{}\")", pair.hash, pair.field),
            Subject::Int(inner) => write!(f, "int({inner})"),
        }
    }
}

/// A constant a test compares with (floats are left out: `==` on them
/// proves little).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Const {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl Const {
    fn of(expr: &Expr) -> Option<Const> {
        match &expr.kind {
            ExprKind::Lit(Lit::Str(text)) => Some(Const::Str(text.clone())),
            ExprKind::Lit(Lit::Int(value)) => Some(Const::Int(*value)),
            ExprKind::Lit(Lit::Bool(value)) => Some(Const::Bool(*value)),
            ExprKind::Unary(UnOp::Neg, inner) => match &inner.kind {
                ExprKind::Lit(Lit::Int(value)) => value.checked_neg().map(Const::Int),
                _ => None,
            },
            _ => None,
        }
    }

    /// The value as a timeline or a hash holds it: text.
    pub fn text(&self) -> String {
        match self {
            Const::Str(text) => text.clone(),
            Const::Int(value) => value.to_string(),
            Const::Bool(value) => value.to_string(),
        }
    }
}

/// What one subject is known to be: one of `within` (when it is `Some`),
/// none of `outside`, and an integer in `range` (inclusive, when it is
/// `Some`: from `<`, `<=`, `>`, `>=` against an integer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Known {
    pub within: Option<BTreeSet<Const>>,
    pub outside: BTreeSet<Const>,
    pub range: Option<(i64, i64)>,
}

impl Known {
    /// Whether `value` satisfies every fact of it.
    pub fn allows(&self, value: &Const) -> bool {
        let in_range = match (self.range, value) {
            (None, _) => true,
            (Some((low, high)), Const::Int(v)) => low <= *v && *v <= high,
            (Some(_), _) => false,
        };
        in_range
            && self
                .within
                .as_ref()
                .is_none_or(|within| within.contains(value))
            && !self.outside.contains(value)
    }

    /// Whether no value can satisfy both this and `other`.
    fn excludes(&self, other: &Known) -> bool {
        let mut both = self.clone();
        both.meet(other);
        match &both.within {
            Some(within) => !within.iter().any(|value| both.allows(value)),
            None => both.range.is_some_and(|(low, high)| low > high),
        }
    }

    pub fn meet(&mut self, other: &Known) {
        self.within = match (self.within.take(), &other.within) {
            (Some(a), Some(b)) => Some(a.intersection(b).cloned().collect()),
            (a, b) => a.or_else(|| b.clone()),
        };
        self.outside.extend(other.outside.iter().cloned());
        self.range = match (self.range, other.range) {
            (Some((a, b)), Some((c, d))) => Some((a.max(c), b.min(d))),
            (a, b) => a.or(b),
        };
    }

    /// A value that satisfies it, when one is named or a range bounds it.
    pub fn example(&self) -> Option<Const> {
        if let Some(within) = &self.within {
            return within.iter().find(|value| self.allows(value)).cloned();
        }
        let (low, high) = self.range?;
        (low..=high.min(low.saturating_add(1000)))
            .map(Const::Int)
            .find(|value| self.allows(value))
    }
}

/// The facts of one condition (a conjunction): each subject with what it
/// is known to be, and the `&&` parts as written, to spot a part and its
/// negation.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub known: Vec<(Subject, Known)>,
    parts: Vec<Expr>,
}

impl Facts {
    /// The facts of every `when` given (all must hold).
    pub fn of<'a>(whens: impl IntoIterator<Item = &'a Expr>) -> Facts {
        let mut facts = Facts::default();
        for expr in whens {
            facts.add(expr);
        }
        facts
    }

    /// `subject` is one of `values`.
    pub fn add_within(&mut self, subject: Subject, values: BTreeSet<Const>) {
        self.merge(
            subject,
            Known {
                within: Some(values),
                ..Known::default()
            },
        );
    }

    /// Whether one of its `&&` parts is written as `part` (spans aside).
    pub fn has_part(&self, part: &Expr) -> bool {
        self.parts.iter().any(|mine| same(mine, part))
    }

    /// The equality or membership test `expr` is, if it is one.
    pub fn test_of(expr: &Expr) -> Option<(Subject, Known)> {
        test(expr, false)
    }

    /// What is known of `subject`.
    pub fn get(&self, subject: &Subject) -> Option<&Known> {
        self.known
            .iter()
            .find(|(known, _)| known == subject)
            .map(|(_, known)| known)
    }

    fn merge(&mut self, subject: Subject, known: Known) {
        match self.known.iter_mut().find(|(s, _)| *s == subject) {
            Some((_, old)) => old.meet(&known),
            None => self.known.push((subject, known)),
        }
    }

    fn add(&mut self, expr: &Expr) {
        if let ExprKind::Binary(BinOp::And, left, right) = &expr.kind {
            self.add(left);
            self.add(right);
            return;
        }
        self.parts.push(expr.clone());
        if let Some((subject, known)) = test(expr, false) {
            self.merge(subject, known);
        }
    }

    /// Whether the two conditions can never both hold: a subject known to
    /// be in disjoint sets, or a part of one that is the negation of a
    /// part of the other.
    pub fn exclusive(&self, other: &Facts) -> bool {
        let disjoint = self.known.iter().any(|(subject, known)| {
            other
                .get(subject)
                .is_some_and(|theirs| known.excludes(theirs))
        });
        disjoint
            || self.parts.iter().any(|part| {
                other
                    .parts
                    .iter()
                    .any(|theirs| negates(part, theirs) || negates(theirs, part))
            })
    }
}

/// An equality or membership test, possibly negated: `to == "a"`,
/// `"a" != state(...)`, `contains(("a", "b"), data.x)`, `!(...)`.
fn test(expr: &Expr, negated: bool) -> Option<(Subject, Known)> {
    let (subject, values, equal) = match &expr.kind {
        ExprKind::Unary(UnOp::Not, inner) => return test(inner, !negated),
        ExprKind::Binary(op @ (BinOp::Eq | BinOp::Ne), left, right) => {
            let (subject, value) = match (Subject::of(left), Const::of(right)) {
                (Some(subject), Some(value)) => (subject, value),
                _ => (Subject::of(right)?, Const::of(left)?),
            };
            (subject, BTreeSet::from([value]), *op == BinOp::Eq)
        }
        ExprKind::Binary(op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), left, right) => {
            return ordering(*op, left, right, negated);
        }
        ExprKind::Call(Builtin::TupleContains, args) => {
            let (value, elements) = args.split_last()?;
            let subject = Subject::of(value)?;
            let values = elements.iter().map(Const::of).collect::<Option<_>>()?;
            (subject, values, true)
        }
        _ => return None,
    };
    let known = if equal != negated {
        Known {
            within: Some(values),
            ..Known::default()
        }
    } else {
        Known {
            outside: values,
            ..Known::default()
        }
    };
    Some((subject, known))
}

/// `int(to) < 15`, `5 <= data.level`, negated or not: an integer range.
fn ordering(op: BinOp, left: &Expr, right: &Expr, negated: bool) -> Option<(Subject, Known)> {
    // Written with the subject on the left: `5 < x` is `x > 5`.
    let (subject, bound, op) = match (Subject::of(left), Const::of(right)) {
        (Some(subject), Some(Const::Int(bound))) => (subject, bound, op),
        _ => match (Subject::of(right), Const::of(left)) {
            (Some(subject), Some(Const::Int(bound))) => {
                let flipped = match op {
                    BinOp::Lt => BinOp::Gt,
                    BinOp::Le => BinOp::Ge,
                    BinOp::Gt => BinOp::Lt,
                    _ => BinOp::Le,
                };
                (subject, bound, flipped)
            }
            _ => return None,
        },
    };
    let op = if negated {
        match op {
            BinOp::Lt => BinOp::Ge,
            BinOp::Le => BinOp::Gt,
            BinOp::Gt => BinOp::Le,
            _ => BinOp::Lt,
        }
    } else {
        op
    };
    let range = match op {
        BinOp::Lt => (i64::MIN, bound.checked_sub(1)?),
        BinOp::Le => (i64::MIN, bound),
        BinOp::Gt => (bound.checked_add(1)?, i64::MAX),
        _ => (bound, i64::MAX),
    };
    Some((
        subject,
        Known {
            range: Some(range),
            ..Known::default()
        },
    ))
}

/// Whether `negation` is `!part`, whatever the spans.
fn negates(part: &Expr, negation: &Expr) -> bool {
    matches!(&negation.kind, ExprKind::Unary(UnOp::Not, inner) if same(inner, part))
}

/// Structural equality, spans ignored.
pub fn same(a: &Expr, b: &Expr) -> bool {
    match (&a.kind, &b.kind) {
        (ExprKind::Unary(op_a, x), ExprKind::Unary(op_b, y)) => op_a == op_b && same(x, y),
        (ExprKind::Binary(op_a, l_a, r_a), ExprKind::Binary(op_b, l_b, r_b)) => {
            op_a == op_b && same(l_a, l_b) && same(r_a, r_b)
        }
        (ExprKind::Call(f_a, args_a), ExprKind::Call(f_b, args_b)) => {
            f_a == f_b
                && args_a.len() == args_b.len()
                && args_a.iter().zip(args_b).all(|(x, y)| same(x, y))
        }
        (x, y) => x == y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(texts: &[&str]) -> Facts {
        let checked: Vec<_> = texts
            .iter()
            .map(|text| crate::when::check(text).unwrap_or_else(|e| panic!("{text}: {e:?}")))
            .collect();
        Facts::of(checked.iter().map(|c| &c.expr))
    }

    #[test]
    fn disjoint_constant_sets_are_exclusive() {
        let a = facts(&[r#"to == "parked""#]);
        let b = facts(&[r#"contains(("stand-by", "ready-to-drive"), to)"#]);
        assert!(a.exclusive(&b));
        let c = facts(&[r#"contains(("parked", "stand-by"), to)"#]);
        assert!(!a.exclusive(&c));
    }

    #[test]
    fn an_equality_and_its_inequality_are_exclusive() {
        let a = facts(&[r#"state("vehicle", "state") == "parked" && data.slot == 0"#]);
        let b = facts(&[r#"state("vehicle", "state") != "parked""#]);
        assert!(a.exclusive(&b));
        assert!(b.exclusive(&a));
        let c = facts(&[r#"!(data.slot == 0)"#]);
        assert!(a.exclusive(&c));
    }

    #[test]
    fn a_when_and_its_negation_are_exclusive() {
        let a = facts(&[r#"int(to) < 15"#]);
        let b = facts(&[r#"!(int(to) < 15)"#]);
        assert!(a.exclusive(&b));
        assert!(b.exclusive(&a));
    }

    #[test]
    fn or_proves_nothing() {
        let a = facts(&[r#"to == "a" || to == "b""#]);
        let b = facts(&[r#"to == "c""#]);
        assert!(!a.exclusive(&b));
    }

    #[test]
    fn disjoint_integer_ranges_are_exclusive() {
        let low = facts(&[r#"int(to) < 15 && int(to) >= 5"#]);
        let critical = facts(&[r#"int(to) < 5"#]);
        assert!(low.exclusive(&critical));
        let above = facts(&[r#"20 < int(to)"#]);
        assert!(low.exclusive(&above));
        let steps = facts(&[r#"contains((5, 10, 15), int(to))"#]);
        assert!(steps.exclusive(&critical));
        assert!(!steps.exclusive(&low));
        let not_low = facts(&[r#"!(int(to) < 20)"#]);
        assert!(not_low.exclusive(&low));
        assert!(!facts(&[r#"int(to) < 15"#]).exclusive(&facts(&[r#"int(to) > 10"#])));
    }

    #[test]
    fn the_rule_and_the_step_whens_add_up() {
        let a = facts(&[
            r#"to == "parked""#,
            r#"int(state("engine-ecu", "speed")) == 0"#,
        ]);
        let speed = Subject::Int(Box::new(Subject::State(StatePair {
            hash: "engine-ecu".into(),
            field: "speed".into(),
        })));
        assert_eq!(a.get(&speed).and_then(Known::example), Some(Const::Int(0)));
    }
}
