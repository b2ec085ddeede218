//! Step fingerprints (docs/bundle.md): what a step *does*, hashed, so the
//! runtime can refuse a pending record whose step changed meaning while the
//! service was down (docs/semantics.md#durability-and-replay).
//!
//! blake3 over a canonical encoding: a versioned domain tag, the action kind
//! and its arguments, the `when` bytecode with every constant index replaced
//! by the constant itself and every state index by its `(hash, field)` pair
//! (pool positions depend on other rules), `after` in nanoseconds, `durable`.
//! The exec timeout is one of the action's arguments. The rule's name, the
//! file, the step's index and other steps are not part of it. Every field is
//! length-prefixed or fixed-size, and every op has a fixed tag written here,
//! so the encoding is unambiguous and does not move when a type gains a
//! variant. Changing anything in this encoding changes every fingerprint:
//! bump [`DOMAIN`] when doing so on purpose.

use crate::bundle::{Action, Fingerprint, StatePair, Step};
use crate::bytecode::{Builtin, Const, EventField, Op, Program};
use crate::template::{Part, Text};

/// Domain separation and encoding version.
pub const DOMAIN: &[u8] = b"scooter-rules step fingerprint v1";

/// The fingerprint of a step, from its parts. `consts` and `state_pairs` are
/// the bundle's pools that the `when` program indexes into.
pub fn step_fingerprint(
    action: &Action,
    when: Option<&Program>,
    after_ns: u64,
    durable: bool,
    consts: &[Const],
    state_pairs: &[StatePair],
) -> Fingerprint {
    let mut enc = Encoder(blake3::Hasher::new());
    enc.bytes(DOMAIN);
    match action {
        // The reply timeout is left out: it says how long to wait for
        // Redis, not what the step does, so changing it keeps records.
        // A plain `push` keeps the encoding it had before values could
        // be computed, so existing records keep matching.
        Action::Redis { list, push, .. } => match push {
            Text::Plain(push) => {
                enc.u8(1);
                enc.str(list);
                enc.str(push);
            }
            Text::Computed(_) => {
                enc.u8(6);
                enc.str(list);
                enc.text(push, consts, state_pairs);
            }
        },
        Action::Exec {
            command,
            timeout_ns,
        } => {
            enc.u8(2);
            enc.str(command);
            enc.u64(*timeout_ns);
        }
        Action::Can(frame) => {
            enc.u8(3);
            enc.str(&frame.iface);
            enc.u32(frame.id);
            enc.u8(u8::from(frame.extended));
            enc.u8(u8::from(frame.rtr));
            enc.u8(frame.dlc);
            enc.bytes(&frame.data);
        }
        // As for `redis`, the reply timeout is not what the step does.
        Action::Publish {
            channel, message, ..
        } => {
            enc.u8(4);
            enc.str(channel);
            enc.text(message, consts, state_pairs);
        }
        Action::Notify(notification) => {
            enc.u8(5);
            enc.str(&notification.id);
            enc.text(&notification.title, consts, state_pairs);
            enc.text(&notification.body, consts, state_pairs);
            enc.str(notification.severity.as_str());
            enc.u32(notification.ttl_ms);
            enc.u8(u8::from(notification.dismiss));
        }
    }
    match when {
        None => enc.u8(0),
        Some(program) => {
            enc.u8(1);
            enc.program(program, consts, state_pairs);
        }
    }
    enc.u64(after_ns);
    enc.u8(u8::from(durable));
    let digest = enc.0.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest.as_bytes()[..16]);
    Fingerprint(out)
}

/// The fingerprint a step should carry (its own `fingerprint` field is
/// ignored).
pub fn fingerprint_of(step: &Step, consts: &[Const], state_pairs: &[StatePair]) -> Fingerprint {
    step_fingerprint(
        &step.action,
        step.when.as_ref(),
        step.after_ns,
        step.durable,
        consts,
        state_pairs,
    )
}

struct Encoder(blake3::Hasher);

impl Encoder {
    fn u8(&mut self, v: u8) {
        self.0.update(&[v]);
    }
    fn u32(&mut self, v: u32) {
        self.0.update(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.update(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.update(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    /// A `publish`/`notify` value: a tag, then the plain text, or each
    /// literal and program of a template (its source is not hashed: the
    /// parts are what it does).
    fn text(&mut self, text: &Text, consts: &[Const], state_pairs: &[StatePair]) {
        match text {
            Text::Plain(text) => {
                self.u8(0);
                self.str(text);
            }
            Text::Computed(template) => {
                self.u8(1);
                self.u64(template.parts.len() as u64);
                for part in template.parts.iter() {
                    match part {
                        Part::Literal(text) => {
                            self.u8(0);
                            self.str(text);
                        }
                        Part::Expr(program) => {
                            self.u8(1);
                            self.program(program, consts, state_pairs);
                        }
                    }
                }
            }
        }
    }

    fn program(&mut self, program: &Program, consts: &[Const], state_pairs: &[StatePair]) {
        self.u64(program.ops.len() as u64);
        for op in &program.ops {
            match *op {
                Op::Const(i) => {
                    self.u8(1);
                    self.constant(consts.get(i as usize), i);
                }
                Op::Field(field) => {
                    self.u8(2);
                    self.u8(match field {
                        EventField::Topic => 1,
                        EventField::Src => 2,
                        EventField::From => 3,
                        EventField::To => 4,
                    });
                }
                Op::Data(i) => {
                    self.u8(3);
                    self.constant(consts.get(i as usize), i);
                }
                Op::State(i) => {
                    self.u8(4);
                    match state_pairs.get(i as usize) {
                        Some(pair) => {
                            self.u8(1);
                            self.str(&pair.hash);
                            self.str(&pair.field);
                        }
                        // Only an unverified program gets here; keep it
                        // distinct from every valid one.
                        None => {
                            self.u8(0xFF);
                            self.u32(i);
                        }
                    }
                }
                Op::Not => self.u8(5),
                Op::Neg => self.u8(6),
                Op::Add => self.u8(7),
                Op::Sub => self.u8(8),
                Op::Mul => self.u8(9),
                Op::Div => self.u8(10),
                Op::Mod => self.u8(11),
                Op::Pow => self.u8(12),
                Op::Eq => self.u8(13),
                Op::Ne => self.u8(14),
                Op::Lt => self.u8(15),
                Op::Le => self.u8(16),
                Op::Gt => self.u8(17),
                Op::Ge => self.u8(18),
                // Jump targets are positions inside this program: they do
                // not depend on anything outside the step.
                Op::AndJump(target) => {
                    self.u8(19);
                    self.u32(target);
                }
                Op::OrJump(target) => {
                    self.u8(20);
                    self.u32(target);
                }
                Op::AssertBool => self.u8(21),
                Op::Call(builtin, n) => {
                    self.u8(22);
                    self.u8(builtin_tag(builtin));
                    self.u8(n);
                }
            }
        }
    }

    fn constant(&mut self, constant: Option<&Const>, index: u32) {
        match constant {
            Some(Const::Str(s)) => {
                self.u8(1);
                self.str(s);
            }
            Some(Const::Int(n)) => {
                self.u8(2);
                self.u64(*n as u64);
            }
            Some(Const::Float(f)) => {
                self.u8(3);
                self.u64(f.to_bits());
            }
            Some(Const::Bool(b)) => {
                self.u8(4);
                self.u8(u8::from(*b));
            }
            Some(Const::Path(path)) => {
                self.u8(5);
                self.u64(path.len() as u64);
                for segment in path {
                    self.str(segment);
                }
            }
            None => {
                self.u8(0xFF);
                self.u32(index);
            }
        }
    }
}

fn builtin_tag(builtin: Builtin) -> u8 {
    match builtin {
        Builtin::Len => 1,
        Builtin::ToLowercase => 2,
        Builtin::ToUppercase => 3,
        Builtin::Trim => 4,
        Builtin::Min => 5,
        Builtin::Max => 6,
        Builtin::If => 7,
        Builtin::Floor => 8,
        Builtin::Ceil => 9,
        Builtin::Round => 10,
        Builtin::Abs => 11,
        Builtin::StartsWith => 12,
        Builtin::EndsWith => 13,
        Builtin::Contains => 14,
        Builtin::Int => 15,
        Builtin::Float => 16,
        Builtin::Str => 17,
        Builtin::TupleContains => 18,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::CanFrame;
    use crate::bytecode::Const as C;

    fn redis(list: &str, push: &str) -> Action {
        Action::redis(list, push)
    }

    /// `data.level > 1 && state("vehicle", "state") == "parked"` laid out
    /// against a pool where the constants sit at `base..` and the state pair
    /// at index `state`.
    fn when_at(base: u32, state: u32) -> Program {
        Program {
            ops: vec![
                Op::Data(base),
                Op::Const(base + 1),
                Op::Gt,
                Op::AndJump(8),
                Op::State(state),
                Op::Const(base + 2),
                Op::Eq,
                Op::AssertBool,
            ],
        }
    }

    fn pool(padding: usize) -> Vec<C> {
        let mut consts: Vec<C> = (0..padding).map(|i| C::Int(i as i64 + 100)).collect();
        consts.push(C::Path(vec!["level".into()]));
        consts.push(C::Int(1));
        consts.push(C::Str("parked".into()));
        consts
    }

    fn pairs(padding: usize) -> Vec<StatePair> {
        let mut pairs: Vec<StatePair> = (0..padding)
            .map(|i| StatePair {
                hash: format!("aaa{i}"),
                field: "x".into(),
            })
            .collect();
        pairs.push(StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        });
        pairs
    }

    fn base_fp() -> Fingerprint {
        let consts = pool(0);
        let pairs = pairs(0);
        step_fingerprint(
            &redis("scooter:blinker", "off"),
            Some(&when_at(0, 0)),
            30_000_000_000,
            true,
            &consts,
            &pairs,
        )
    }

    #[test]
    fn pool_positions_do_not_matter() {
        let consts = pool(5);
        let pairs = pairs(3);
        let moved = step_fingerprint(
            &redis("scooter:blinker", "off"),
            Some(&when_at(5, 3)),
            30_000_000_000,
            true,
            &consts,
            &pairs,
        );
        assert_eq!(moved, base_fp());
        assert_eq!(base_fp().to_string().len(), 32);
    }

    #[test]
    fn every_change_of_behaviour_changes_it() {
        let consts = pool(0);
        let pairs = pairs(0);
        let when = when_at(0, 0);
        let fp = |action: &Action, when: Option<&Program>, after: u64, durable: bool| {
            step_fingerprint(action, when, after, durable, &consts, &pairs)
        };
        let blinker = redis("scooter:blinker", "off");
        let base = fp(&blinker, Some(&when), 30_000_000_000, true);
        assert_eq!(base, base_fp());
        let changed = [
            fp(
                &redis("scooter:blinker", "on"),
                Some(&when),
                30_000_000_000,
                true,
            ),
            fp(
                &redis("scooter:horn", "off"),
                Some(&when),
                30_000_000_000,
                true,
            ),
            // The boundary between list and push is part of the encoding.
            fp(
                &redis("scooter:blinkero", "ff"),
                Some(&when),
                30_000_000_000,
                true,
            ),
            fp(&blinker, Some(&when), 30_000_000_001, true),
            fp(&blinker, Some(&when), 30_000_000_000, false),
            fp(&blinker, None, 30_000_000_000, true),
        ];
        for (i, other) in changed.iter().enumerate() {
            assert_ne!(*other, base, "change {i}");
        }

        // The when: a different constant, state pair, path, or op.
        let mut other_consts = consts.clone();
        other_consts[1] = C::Int(2);
        let with = |consts: &[C], pairs: &[StatePair], when: &Program| {
            step_fingerprint(&blinker, Some(when), 30_000_000_000, true, consts, pairs)
        };
        assert_ne!(with(&other_consts, &pairs, &when), base);
        let mut other_consts = consts.clone();
        other_consts[0] = C::Path(vec!["lev".into(), "el".into()]);
        assert_ne!(with(&other_consts, &pairs, &when), base);
        let other_pairs = vec![StatePair {
            hash: "vehicle".into(),
            field: "mode".into(),
        }];
        assert_ne!(with(&consts, &other_pairs, &when), base);
        let mut other_when = when.clone();
        other_when.ops[2] = Op::Ge;
        assert_ne!(with(&consts, &pairs, &other_when), base);
        let mut other_when = when.clone();
        other_when.ops[3] = Op::OrJump(8);
        assert_ne!(with(&consts, &pairs, &other_when), base);
    }

    #[test]
    fn exec_and_can_arguments_count() {
        let exec = |command: &str, timeout_ns| Action::Exec {
            command: command.into(),
            timeout_ns,
        };
        let fp = |a: &Action| step_fingerprint(a, None, 0, false, &[], &[]);
        let base = fp(&exec("/usr/bin/beep", 10_000_000_000));
        assert_eq!(base, fp(&exec("/usr/bin/beep", 10_000_000_000)));
        assert_ne!(base, fp(&exec("/usr/bin/beep", 5_000_000_000)));
        assert_ne!(base, fp(&exec("/usr/bin/boop", 10_000_000_000)));

        let frame = CanFrame {
            iface: "can0".into(),
            id: 0x123,
            extended: false,
            rtr: false,
            dlc: 2,
            data: vec![0xde, 0xad],
        };
        let can = |f: &CanFrame| fp(&Action::Can(f.clone()));
        let base = can(&frame);
        assert_eq!(base, can(&frame.clone()));
        let variants = [
            CanFrame {
                iface: "can1".into(),
                ..frame.clone()
            },
            CanFrame {
                id: 0x124,
                ..frame.clone()
            },
            CanFrame {
                data: vec![0xde, 0xae],
                ..frame.clone()
            },
            CanFrame {
                rtr: true,
                data: vec![],
                ..frame.clone()
            },
            CanFrame {
                extended: true,
                ..frame.clone()
            },
        ];
        for v in &variants {
            assert_ne!(can(v), base, "{v:?}");
        }
        // Different action kinds never collide on similar arguments.
        assert_ne!(
            fp(&redis("a", "b")),
            fp(&exec("a", u64::from_le_bytes(*b"\x01\0\0\0\0\0\0\0")))
        );
    }

    #[test]
    fn pinned_value() {
        // Pins the encoding itself: if this changes, every pending record
        // in the field is dropped at the next start. Bump DOMAIN on purpose.
        assert_eq!(
            step_fingerprint(&redis("scooter:blinker", "on"), None, 0, false, &[], &[]).to_string(),
            PINNED
        );
    }

    const PINNED: &str = "5e1cb6d0db4baa48f29f74b21ec9beab";
}
