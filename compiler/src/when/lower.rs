//! Lowering a checked `when` to `rulecore` bytecode (docs/when-language.md, docs/bundle.md).
//!
//! Post-order stack code: operands first, then the operator. `&&` and `||`
//! short-circuit with `AndJump`/`OrJump` over the right operand, which ends
//! with `AssertBool` so that a non-boolean right side is still an error, as
//! in evalexpr. No constant folding: every operation runs in the VM, so the
//! VM alone decides overflow and type errors, exactly once.

use super::{BinOp, CheckedWhen, Expr, ExprKind, Lit, UnOp};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Const, Op, Program};
use std::collections::HashMap;

/// A constant's identity for interning: floats by their bits, so `0.0` and
/// `-0.0` stay distinct and NaN interns to itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Str(String),
    Int(i64),
    Float(u64),
    Bool(bool),
    Path(Vec<String>),
}

fn key_of(value: &Const) -> Key {
    match value {
        Const::Str(s) => Key::Str(s.clone()),
        Const::Int(i) => Key::Int(*i),
        Const::Float(f) => Key::Float(f.to_bits()),
        Const::Bool(b) => Key::Bool(*b),
        Const::Path(p) => Key::Path(p.clone()),
    }
}

/// The bundle-wide constant pool and `state()` pair list. One pool serves
/// every expression of a bundle; [`ConstPool::finish`] hands both lists to
/// the bundle.
#[derive(Debug, Default)]
pub struct ConstPool {
    consts: Vec<Const>,
    const_index: HashMap<Key, u32>,
    pairs: Vec<StatePair>,
    pair_index: HashMap<StatePair, u32>,
}

impl ConstPool {
    pub fn new() -> Self {
        Self::default()
    }

    /// A pool whose state pairs are `pairs`, sorted and without duplicates.
    /// The bundle lists its pairs sorted (docs/bundle.md): register every
    /// checked expression's `state_pairs` here before lowering any of them,
    /// and [`ConstPool::finish`] returns them in that order.
    pub fn with_state_pairs(pairs: impl IntoIterator<Item = StatePair>) -> Self {
        let mut sorted: Vec<StatePair> = pairs.into_iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut pool = Self::new();
        for pair in sorted {
            pool.state_pair(&pair);
        }
        pool
    }

    /// The index of `value`, added if new.
    pub fn constant(&mut self, value: Const) -> u32 {
        let key = key_of(&value);
        if let Some(&index) = self.const_index.get(&key) {
            return index;
        }
        let index = index_u32(self.consts.len());
        self.consts.push(value);
        self.const_index.insert(key, index);
        index
    }

    /// The index of `pair` in the bundle's `state_pairs`, added if new.
    pub fn state_pair(&mut self, pair: &StatePair) -> u32 {
        if let Some(&index) = self.pair_index.get(pair) {
            return index;
        }
        let index = index_u32(self.pairs.len());
        self.pairs.push(pair.clone());
        self.pair_index.insert(pair.clone(), index);
        index
    }

    /// The constants and the state pairs, in index order.
    pub fn finish(self) -> (Vec<Const>, Vec<StatePair>) {
        (self.consts, self.pairs)
    }
}

/// Pool and jump indices are `u32` in the bytecode. A bundle with four
/// billion constants cannot be built in memory anyway; saturating keeps this
/// total without a panic path.
fn index_u32(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// Compiles a checked expression; constants and state pairs go to `pool`.
pub fn lower(checked: &CheckedWhen, pool: &mut ConstPool) -> Program {
    let mut ops = Vec::new();
    emit(&checked.expr, pool, &mut ops);
    Program { ops }
}

fn emit(expr: &Expr, pool: &mut ConstPool, ops: &mut Vec<Op>) {
    match &expr.kind {
        ExprKind::Lit(lit) => {
            let value = match lit {
                Lit::Str(s) => Const::Str(s.clone()),
                Lit::Int(i) => Const::Int(*i),
                Lit::Float(f) => Const::Float(*f),
                Lit::Bool(b) => Const::Bool(*b),
            };
            ops.push(Op::Const(pool.constant(value)));
        }
        ExprKind::Field(field) => ops.push(Op::Field(*field)),
        ExprKind::Data(path) => ops.push(Op::Data(pool.constant(Const::Path(path.clone())))),
        ExprKind::State(pair) => ops.push(Op::State(pool.state_pair(pair))),
        ExprKind::Unary(op, inner) => {
            emit(inner, pool, ops);
            ops.push(match op {
                UnOp::Neg => Op::Neg,
                UnOp::Not => Op::Not,
            });
        }
        ExprKind::Binary(op @ (BinOp::And | BinOp::Or), left, right) => {
            emit(left, pool, ops);
            let jump_at = ops.len();
            // Placeholder target, patched once the right side is emitted.
            ops.push(if *op == BinOp::And {
                Op::AndJump(0)
            } else {
                Op::OrJump(0)
            });
            emit(right, pool, ops);
            ops.push(Op::AssertBool);
            let target = index_u32(ops.len());
            ops[jump_at] = if *op == BinOp::And {
                Op::AndJump(target)
            } else {
                Op::OrJump(target)
            };
        }
        ExprKind::Binary(op, left, right) => {
            emit(left, pool, ops);
            emit(right, pool, ops);
            ops.push(match op {
                BinOp::Add => Op::Add,
                BinOp::Sub => Op::Sub,
                BinOp::Mul => Op::Mul,
                BinOp::Div => Op::Div,
                BinOp::Mod => Op::Mod,
                BinOp::Pow => Op::Pow,
                BinOp::Eq => Op::Eq,
                BinOp::Ne => Op::Ne,
                BinOp::Lt => Op::Lt,
                BinOp::Le => Op::Le,
                BinOp::Gt => Op::Gt,
                BinOp::Ge => Op::Ge,
                // Handled by the arm above; kept total without a panic.
                BinOp::And => Op::AssertBool,
                BinOp::Or => Op::AssertBool,
            });
        }
        ExprKind::Call(builtin, args) => {
            for arg in args {
                emit(arg, pool, ops);
            }
            let argc = u8::try_from(args.len()).unwrap_or(u8::MAX);
            ops.push(Op::Call(*builtin, argc));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::when::check;
    use rulecore::bytecode::{Builtin, EventField};

    fn lowered(text: &str, pool: &mut ConstPool) -> Vec<Op> {
        let checked = check(text).unwrap_or_else(|p| panic!("{text}: {p:?}"));
        lower(&checked, pool).ops
    }

    #[test]
    fn short_circuit_jumps_past_the_right_side() {
        let mut pool = ConstPool::new();
        let ops = lowered(r#"to == "parked" && data.speed < 5 || false"#, &mut pool);
        assert_eq!(
            ops,
            vec![
                Op::Field(EventField::To),
                Op::Const(0),
                Op::Eq,
                Op::AndJump(8),
                Op::Data(1),
                Op::Const(2),
                Op::Lt,
                Op::AssertBool,
                Op::OrJump(11),
                Op::Const(3),
                Op::AssertBool,
            ]
        );
        let (consts, pairs) = pool.finish();
        assert_eq!(
            consts,
            vec![
                Const::Str("parked".into()),
                Const::Path(vec!["speed".into()]),
                Const::Int(5),
                Const::Bool(false),
            ]
        );
        assert!(pairs.is_empty());
    }

    #[test]
    fn pool_interns_across_expressions() {
        let pair = |h: &str, f: &str| StatePair {
            hash: h.into(),
            field: f.into(),
        };
        let mut pool =
            ConstPool::with_state_pairs([pair("vehicle", "state"), pair("battery", "charge")]);
        let a = lowered(
            r#"state("vehicle", "state") == "parked" && min(1, 2.5) == 1"#,
            &mut pool,
        );
        let b = lowered(
            r#"str::starts_with(state("battery", "charge"), "1") && 1.5 != 0.0 * 1"#,
            &mut pool,
        );
        assert_eq!(a[0], Op::State(1));
        assert_eq!(b[0], Op::State(0));
        assert!(a.contains(&Op::Call(Builtin::Min, 2)));
        assert!(b.contains(&Op::Call(Builtin::StartsWith, 2)));
        let (consts, pairs) = pool.finish();
        assert_eq!(
            pairs,
            vec![pair("battery", "charge"), pair("vehicle", "state")]
        );
        assert_eq!(
            consts,
            vec![
                Const::Str("parked".into()),
                Const::Int(1),
                Const::Float(2.5),
                Const::Str("1".into()),
                Const::Float(1.5),
                Const::Float(0.0),
            ]
        );
    }
}
