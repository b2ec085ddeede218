//! Differential tests (docs/when-language.md): every `when` the compiler accepts must
//! evaluate the same in evalexpr 13 (the reference) and in our pipeline
//! (`when::check` -> `when::lower` -> `rulecore::vm::Plan`, the one evaluator,
//! with the op-by-op `rulecore::vm::oracle` beside it), on every input: the
//! same boolean, or an error in all.
//!
//! evalexpr evaluates both sides of `&&` / `||`; the VM short-circuits. The
//! reference answer is therefore evalexpr's with short-circuiting emulated
//! (see [`eval_short_circuit`]); where plain evalexpr succeeds, the emulation
//! must give the same answer, so the only tolerated difference is an error
//! on a side the VM never evaluates.
//!
//! Inputs are mapped as the runtime maps them: absent `src`/`from`/`to` are
//! `""`; `data.*` JSON strings, booleans, ints (fitting i64) and other
//! numbers (float) are evalexpr values, `null` or a missing key is
//! `Value::Empty`, and an array or object is left undefined in the evalexpr
//! context so that reading it is an error, as it is in the VM.
//!
//! Every accepted expression's bytecode must also pass the bundle verifier
//! (`rulecore::verify`), which types it by the checker's own table.

use evalexpr::{
    ContextWithMutableFunctions, ContextWithMutableVariables, DefaultNumericTypes, EvalexprError,
    Function, HashMapContext, Node, Operator, Value,
};
use rulec::when::{check, lower, ConstPool, Expr, ExprKind};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Const, Program};
use rulecore::event::Event;
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use test_kit::fuzz::{Fuzz, Rng};

type Ctx = HashMapContext<DefaultNumericTypes>;
type EvalResult = Result<bool, String>;

// ---------------------------------------------------------------- inputs --

const STRINGS: &[&str] = &[
    "",
    "parked",
    "Parked",
    " parked ",
    "alarm.triggered",
    "alarm.",
    "a",
    "ab",
    "ÜBER",
    "straße",
    "x\"y",
    "back\\slash",
    "1",
    "2.5",
    // Texts `int` and `float` read, or refuse.
    " 42 ",
    "-7",
    "+3",
    "1e3",
    "NaN",
    "inf",
    "9223372036854775808",
    "12abc",
];
const INTS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "10",
    "100",
    "0x1f",
    "3037000500",
    "4611686018427387904",
    "9223372036854775807",
];
const FLOATS: &[&str] = &["0.5", "2.0", "1.5", "0.0", "1e300", "1e-3", "3.25", "100.0"];
/// The paths the context defines; `o` is usually an object holding `x`/`y`.
const DATA_PATHS: &[&str] = &["a", "b", "c", "d", "o.x", "o.y", "o"];
/// The paths expressions read: `data.o` itself only now and then.
const READ_PATHS: &[&str] = &["a", "b", "c", "d", "a", "b", "c", "d", "o.x", "o.y", "o"];
const STATE_PAIRS: &[(&str, &str)] = &[("vehicle", "state"), ("battery:0", "charge")];

fn random_json(rng: &mut Rng, strings: &[String]) -> serde_json::Value {
    match rng.below(14) {
        0..=3 => json!(*rng.pick(&[
            0_i64,
            1,
            -1,
            2,
            3,
            7,
            10,
            -100,
            i64::MAX,
            i64::MIN,
            4_611_686_018_427_387_904,
            3_037_000_500
        ])),
        4 => json!(u64::MAX),
        5..=6 => json!(*rng.pick(&[0.5, -0.0, 2.0, 1.5, -2.5, 1e300, -1e300, 1e-10, 3.0])),
        7..=9 => json!(rng.pick(strings)),
        10 => json!(rng.one_in(2)),
        11 => serde_json::Value::Null,
        12 => json!([1, 2]),
        _ => json!({ "k": 1 }),
    }
}

/// Puts `value` at `path` in `data`, making objects on the way; gives up
/// where a scalar is in the way (that key then reads as missing).
fn insert(data: &mut serde_json::Value, path: &[&str], value: serde_json::Value) {
    let Some((last, init)) = path.split_last() else {
        return;
    };
    let mut at = data;
    for key in init {
        let Some(object) = at.as_object_mut() else {
            return;
        };
        at = object.entry(key.to_string()).or_insert_with(|| json!({}));
    }
    if let Some(object) = at.as_object_mut() {
        object.insert(last.to_string(), value);
    }
}

#[derive(Debug)]
struct Inputs {
    event: Event,
    state: HashMap<(String, String), String>,
}

fn random_inputs(
    rng: &mut Rng,
    strings: &[String],
    paths: &[String],
    pairs: &[(String, String)],
) -> Inputs {
    let field = |rng: &mut Rng| (!rng.one_in(5)).then(|| rng.pick(strings).clone());
    let topic = field(rng).unwrap_or_default();
    let src = field(rng);
    let from = field(rng);
    let to = field(rng);
    let mut data = json!({});
    // Shorter paths first, so that `o` is sometimes a scalar above `o.x`.
    let mut sorted: Vec<&String> = paths.iter().collect();
    sorted.sort_by_key(|p| p.len());
    for path in sorted {
        if rng.one_in(6) {
            continue;
        }
        let parts: Vec<&str> = path.split('.').collect();
        let value = if path == "o" && !rng.one_in(3) {
            json!({})
        } else {
            random_json(rng, strings)
        };
        insert(&mut data, &parts, value);
    }
    if rng.one_in(25) {
        data = serde_json::Value::Null;
    }
    let mut state = HashMap::new();
    for pair in pairs {
        if !rng.one_in(4) {
            state.insert(pair.clone(), rng.pick(strings).clone());
        }
    }
    Inputs {
        event: Event {
            topic: topic.into(),
            src: src.map(Into::into),
            from: from.map(Into::into),
            to: to.map(Into::into),
            data: data.into(),
            ..Event::default()
        },
        state,
    }
}

// ----------------------------------------------------------- generation --

#[derive(Clone, Copy, PartialEq)]
enum T {
    Bool,
    Int,
    Float,
    Num,
    Str,
    Any,
}

struct Gen<'a> {
    rng: &'a mut Rng,
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Gen<'_> {
    fn pick<'b>(&mut self, items: &'b [&'b str]) -> &'b str {
        let item: &&str = self.rng.pick(items);
        item
    }

    fn data(&mut self) -> String {
        format!("data.{}", self.pick(READ_PATHS))
    }

    fn leaf(&mut self, t: T) -> String {
        match t {
            T::Bool => match self.rng.below(3) {
                0 => self.data(),
                _ => self.pick(&["true", "false"]).to_string(),
            },
            T::Int => {
                let lit = self.pick(INTS).to_string();
                if self.rng.one_in(6) {
                    format!("-{lit}")
                } else {
                    lit
                }
            }
            T::Float => self.pick(FLOATS).to_string(),
            T::Num => match self.rng.below(3) {
                0 => self.leaf(T::Int),
                1 => self.leaf(T::Float),
                _ => self.data(),
            },
            T::Str => match self.rng.below(4) {
                0 => quote(self.pick(STRINGS)),
                1 => self.pick(&["topic", "src", "from", "to"]).to_string(),
                2 => {
                    let (h, f) = *self.rng.pick(STATE_PAIRS);
                    format!("state({}, {})", quote(h), quote(f))
                }
                _ => self.data(),
            },
            T::Any => self.data(),
        }
    }

    fn expr(&mut self, t: T, depth: u32) -> String {
        if depth == 0 || self.rng.one_in(4) {
            return self.leaf(t);
        }
        let d = depth - 1;
        match t {
            T::Bool => match self.rng.below(15) {
                0 | 1 => {
                    let op = self.pick(&["==", "!=", "<", "<=", ">", ">="]);
                    let (a, b) = (self.num_like(), self.num_like());
                    format!("({} {op} {})", self.expr(a, d), self.expr(b, d))
                }
                2 => {
                    let same = *self.rng.pick(&[T::Int, T::Float, T::Str, T::Bool, T::Any]);
                    let op = self.pick(&["==", "!="]);
                    format!("({} {op} {})", self.expr(same, d), self.expr(same, d))
                }
                3 => {
                    let other = *self.rng.pick(&[T::Int, T::Float, T::Str, T::Bool, T::Num]);
                    let op = self.pick(&["==", "!="]);
                    format!("({} {op} {})", self.expr(T::Any, d), self.expr(other, d))
                }
                4 => {
                    let op = self.pick(&["<", "<=", ">", ">="]);
                    format!("({} {op} {})", self.expr(T::Str, d), self.expr(T::Str, d))
                }
                5 => format!("!({})", self.expr(T::Bool, d)),
                6 | 7 => {
                    let op = self.pick(&["&&", "||"]);
                    format!("({} {op} {})", self.expr(T::Bool, d), self.expr(T::Bool, d))
                }
                8 => {
                    let f = self.pick(&["str::starts_with", "str::ends_with", "str::contains"]);
                    format!("{f}({}, {})", self.expr(T::Str, d), self.expr(T::Str, d))
                }
                9 => format!(
                    "if({}, {}, {})",
                    self.expr(T::Bool, d),
                    self.expr(T::Bool, d),
                    self.expr(T::Bool, d)
                ),
                10 => {
                    // Precedence without parentheses.
                    let (a, b, c) = (self.leaf(T::Bool), self.leaf(T::Bool), self.leaf(T::Bool));
                    let (x, y) = (self.pick(&["&&", "||"]), self.pick(&["&&", "||"]));
                    let bang = if self.rng.one_in(2) { "!" } else { "" };
                    format!("{bang}{a} {x} {b} {y} {c}")
                }
                11 => {
                    let op = self.pick(&["<", "<=", ">", ">=", "==", "!="]);
                    let other = *self.rng.pick(&[T::Any, T::Str, T::Num]);
                    format!("({} {op} {})", self.expr(T::Any, d), self.expr(other, d))
                }
                12 => {
                    // Membership: elements of mixed types, as authors write
                    // `contains(("parked", "stand-by"), to)`.
                    let kinds = [T::Str, T::Str, T::Int, T::Float, T::Bool, T::Any];
                    let n = 2 + self.rng.below(3);
                    let elements: Vec<String> = (0..n)
                        .map(|_| {
                            let t = *self.rng.pick(&kinds);
                            self.expr(t, d)
                        })
                        .collect();
                    let t = *self.rng.pick(&kinds);
                    format!("contains(({}), {})", elements.join(", "), self.expr(t, d))
                }
                13 => {
                    // A converted state value or data value against a number.
                    let op = self.pick(&["<", "<=", ">", ">=", "==", "!="]);
                    let (f, n) = if self.rng.one_in(2) {
                        ("int", T::Int)
                    } else {
                        ("float", T::Float)
                    };
                    let arg = *self.rng.pick(&[T::Str, T::Any, T::Num]);
                    format!("{f}({}) {op} {}", self.expr(arg, d), self.expr(n, d))
                }
                _ => {
                    // Arithmetic precedence without parentheses.
                    let ops = ["+", "-", "*", "/", "%", "^"];
                    let (x, y) = (self.pick(&ops), self.pick(&ops));
                    let (a, b, c) = (self.leaf(T::Num), self.leaf(T::Num), self.leaf(T::Num));
                    let cmp = self.pick(&["<", ">=", "!="]);
                    format!("{a} {x} {b} {y} {c} {cmp} {}", self.leaf(T::Num))
                }
            },
            T::Int => match self.rng.below(9) {
                0..=2 => {
                    let op = self.pick(&["+", "-", "*", "/", "%"]);
                    format!("({} {op} {})", self.expr(T::Int, d), self.expr(T::Int, d))
                }
                3 => format!("-({})", self.expr(T::Int, d)),
                4 => format!("len({})", self.expr(T::Str, d)),
                5 => format!("math::abs({})", self.expr(T::Int, d)),
                6 => {
                    let f = self.pick(&["min", "max"]);
                    format!("{f}({}, {})", self.expr(T::Int, d), self.expr(T::Int, d))
                }
                7 => {
                    let arg = *self.rng.pick(&[T::Str, T::Any, T::Num, T::Float]);
                    format!("int({})", self.expr(arg, d))
                }
                _ => format!(
                    "if({}, {}, {})",
                    self.expr(T::Bool, d),
                    self.expr(T::Int, d),
                    self.expr(T::Int, d)
                ),
            },
            T::Float => match self.rng.below(7) {
                0 => {
                    let f = self.pick(&["floor", "ceil", "round"]);
                    format!("{f}({})", self.expr(T::Num, d))
                }
                1 => format!("({} ^ {})", self.expr(T::Num, d), self.expr(T::Num, d)),
                2 | 3 => {
                    let op = self.pick(&["+", "-", "*", "/", "%"]);
                    let num = self.expr(T::Num, d);
                    if self.rng.one_in(2) {
                        format!("({} {op} {num})", self.expr(T::Float, d))
                    } else {
                        format!("({num} {op} {})", self.expr(T::Float, d))
                    }
                }
                4 => format!("-({})", self.expr(T::Float, d)),
                5 => {
                    let arg = *self.rng.pick(&[T::Str, T::Any, T::Num]);
                    format!("float({})", self.expr(arg, d))
                }
                _ => format!("math::abs({})", self.expr(T::Float, d)),
            },
            T::Num => match self.rng.below(6) {
                0 => self.expr(T::Int, depth),
                1 => self.expr(T::Float, depth),
                2 => {
                    let op = self.pick(&["+", "-", "*", "/", "%"]);
                    format!("({} {op} {})", self.expr(T::Any, d), self.expr(T::Num, d))
                }
                3 => {
                    let f = self.pick(&["min", "max"]);
                    let extra = if self.rng.one_in(2) {
                        format!(", {}", self.expr(T::Num, d))
                    } else {
                        String::new()
                    };
                    format!(
                        "{f}({}, {}{extra})",
                        self.expr(T::Num, d),
                        self.expr(T::Num, d)
                    )
                }
                4 => format!("math::abs({})", self.expr(T::Any, d)),
                _ => format!("-{}", self.data()),
            },
            T::Str => match self.rng.below(6) {
                0 => format!("({} + {})", self.expr(T::Str, d), self.expr(T::Str, d)),
                1 => {
                    let f = self.pick(&["str::to_lowercase", "str::to_uppercase", "str::trim"]);
                    format!("{f}({})", self.expr(T::Str, d))
                }
                2 => format!(
                    "if({}, {}, {})",
                    self.expr(T::Bool, d),
                    self.expr(T::Str, d),
                    self.expr(T::Str, d)
                ),
                3 => {
                    let arg = *self.rng.pick(&[T::Int, T::Float, T::Bool, T::Str, T::Any]);
                    format!("str({})", self.expr(arg, d))
                }
                _ => self.leaf(T::Str),
            },
            T::Any => match self.rng.below(3) {
                0 => format!("({} + {})", self.data(), self.expr(T::Any, d)),
                1 => format!(
                    "if({}, {}, {})",
                    self.expr(T::Bool, d),
                    self.expr(T::Any, d),
                    self.expr(T::Any, d)
                ),
                _ => self.data(),
            },
        }
    }

    fn num_like(&mut self) -> T {
        *self.rng.pick(&[T::Int, T::Float, T::Num, T::Any])
    }
}

// ------------------------------------------------------------ evaluation --

fn json_to_evalexpr(json: &serde_json::Value) -> Option<Value> {
    Some(match json {
        serde_json::Value::Null => Value::Empty,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64()?),
        },
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(_) | serde_json::Value::Object(_) => return None,
    })
}

fn two_strings(arg: &Value) -> Result<(String, String), EvalexprError> {
    let tuple = arg.as_fixed_len_tuple(2)?;
    Ok((tuple[0].as_string()?, tuple[1].as_string()?))
}

/// The evalexpr context for one input: the event's names as variables, our
/// functions registered the way the compiler expects them.
fn context(inputs: &Inputs, paths: &[String]) -> Ctx {
    let mut ctx = Ctx::new();
    let event = &inputs.event;
    let fields = [
        ("topic", event.topic.as_str()),
        ("src", event.src()),
        ("from", event.from()),
        ("to", event.to()),
    ];
    let set = |ctx: &mut Ctx, name: &str, value: Value| {
        ctx.set_value(name.to_string(), value)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    };
    for (name, value) in fields {
        set(&mut ctx, name, Value::String(value.to_string()));
    }
    for path in paths {
        let value = match event.data_at(path.split('.')) {
            None => Some(Value::Empty),
            Some(data) => json_to_evalexpr(&data.to_json()),
        };
        if let Some(value) = value {
            set(&mut ctx, &format!("data.{path}"), value);
        }
    }
    let state = inputs.state.clone();
    let functions = [(
        "state",
        Function::new(move |arg: &Value| {
            let key = two_strings(arg)?;
            Ok(Value::String(state.get(&key).cloned().unwrap_or_default()))
        }),
    )];
    // Ours, as the checker registers them: the string tests and the
    // conversions (docs/when-language.md#functions).
    let ours = rulec::when::reference::functions();
    for (name, function) in functions.into_iter().chain(ours) {
        ctx.set_function(name.to_string(), function)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    ctx
}

fn has_logic(node: &Node) -> bool {
    matches!(node.operator(), Operator::And | Operator::Or) || node.children().iter().any(has_logic)
}

/// evalexpr's evaluation with `&&` / `||` short-circuiting: the logic
/// operators are evaluated lazily; any other node gets its children's values
/// (evaluated the same way, left to right) as constants and is then
/// evaluated by evalexpr itself.
fn eval_short_circuit(node: &Node, ctx: &Ctx) -> Result<Value, EvalexprError> {
    match node.operator() {
        Operator::And | Operator::Or => {
            let is_and = *node.operator() == Operator::And;
            let [left, right] = node.children() else {
                panic!("binary operator without two children");
            };
            let left = eval_short_circuit(left, ctx)?.as_boolean()?;
            if left != is_and {
                return Ok(Value::Boolean(left));
            }
            Ok(Value::Boolean(
                eval_short_circuit(right, ctx)?.as_boolean()?,
            ))
        }
        _ if !has_logic(node) => node.eval_with_context(ctx),
        _ => {
            let mut copy = node.clone();
            for kid in copy.children_mut().iter_mut() {
                let value = eval_short_circuit(kid, ctx)?;
                *kid.operator_mut() = Operator::Const { value };
                kid.children_mut().clear();
            }
            copy.eval_with_context(ctx)
        }
    }
}

fn as_bool(result: Result<Value, EvalexprError>) -> EvalResult {
    match result {
        Ok(Value::Boolean(b)) => Ok(b),
        Ok(other) => Err(format!("not a boolean: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The three answers for one expression and input.
struct Outcome {
    strict: EvalResult,
    reference: EvalResult,
    vm: EvalResult,
}

enum Case {
    Rejected,
    /// evalexpr panicked (integer `math::abs(i64::MIN)` overflows inside
    /// evalexpr in a debug build); nothing to compare.
    ReferencePanicked,
    Ran(Outcome),
}

fn run(text: &str, inputs: &Inputs, paths: &[String]) -> Case {
    let Ok(checked) = check(text) else {
        return Case::Rejected;
    };
    let mut pool = ConstPool::new();
    let program = lower(&checked, &mut pool);
    let (consts, pairs) = pool.finish();
    run_compiled(text, &program, &consts, &pairs, inputs, paths)
}

/// Compares a program (lowered into any pool) with evalexpr on `text`.
fn run_compiled(
    text: &str,
    program: &Program,
    consts: &[Const],
    pairs: &[StatePair],
    inputs: &Inputs,
    paths: &[String],
) -> Case {
    let state: Vec<String> = pairs
        .iter()
        .map(|p| {
            let key = (p.hash.clone(), p.field.clone());
            inputs.state.get(&key).cloned().unwrap_or_default()
        })
        .collect();
    // The checker and the bundle verifier read one table of types
    // (rulecore::when_types): whatever the checker accepts, the verifier
    // accepts as bytecode.
    if let Err(error) = rulecore::verify::verify_program(program, consts, pairs.len()) {
        panic!("the checker accepts `{text}`, the verifier refuses {program:?}: {error}");
    }
    // The op-by-op interpreter, the oracle of the plan.
    let vm = rulecore::vm::oracle::eval_bool(program, consts, &inputs.event, &state);
    // The product's one evaluator (docs/engine.md#the-when-plan): every
    // program the compiler emits gets a plan, and it gives exactly the
    // oracle's answer or error.
    let plan = rulecore::vm::Plan::new(program, consts)
        .unwrap_or_else(|| panic!("no plan for the compiled `{text}`: {program:?}"));
    assert_eq!(
        plan.eval_bool(consts, &inputs.event, &state),
        vm,
        "the plan and the oracle differ on `{text}` with {inputs:?}"
    );
    let vm = vm.map_err(|e| e.to_string());

    let tree = evalexpr::build_operator_tree::<DefaultNumericTypes>(text)
        .unwrap_or_else(|e| panic!("accepted but evalexpr cannot parse {text}: {e}"));
    let ctx = context(inputs, paths);
    CATCHING.with(|c| c.set(true));
    let evaluated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (
            as_bool(tree.eval_with_context(&ctx)),
            as_bool(eval_short_circuit(&tree, &ctx)),
        )
    }));
    CATCHING.with(|c| c.set(false));
    match evaluated {
        Ok((strict, reference)) => Case::Ran(Outcome {
            strict,
            reference,
            vm,
        }),
        Err(_) => Case::ReferencePanicked,
    }
}

fn agrees(outcome: &Outcome) -> bool {
    let same = |a: &EvalResult, b: &EvalResult| match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(_), Err(_)) => true,
        _ => false,
    };
    let strict_implies_reference = outcome.strict.is_err() || outcome.strict == outcome.reference;
    strict_implies_reference && same(&outcome.reference, &outcome.vm)
}

fn describe(text: &str, inputs: &Inputs, outcome: &Outcome) -> String {
    let event = serde_json::to_string(&inputs.event).unwrap_or_default();
    let mut state: Vec<_> = inputs.state.iter().collect();
    state.sort();
    format!(
        "expression: {text}\n  event:    {event}\n  state:    {state:?}\n  evalexpr: {:?}\n  evalexpr (short-circuit): {:?}\n  vm:       {:?}\n",
        outcome.strict, outcome.reference, outcome.vm
    )
}

thread_local! {
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Silences the message of the evalexpr panics we catch, and only those.
fn quiet_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !CATCHING.with(std::cell::Cell::get) {
            default(info);
        }
    }));
}

// ----------------------------------------------------------------- tests --

#[derive(Default)]
struct Tally {
    generated: usize,
    rejected: usize,
    panicked: usize,
    ran: usize,
    vm_true: usize,
    vm_false: usize,
    vm_err: usize,
    short_circuit_saved: usize,
    /// Compared cases that call `int`, `float`, `str` or `contains`.
    conversions: usize,
    /// VM error messages and how often each came up.
    errors: std::collections::BTreeMap<String, usize>,
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, text: &str, inputs: &Inputs, case: Case) {
        self.generated += 1;
        match case {
            Case::Rejected => self.rejected += 1,
            Case::ReferencePanicked => self.panicked += 1,
            Case::Ran(outcome) => {
                self.ran += 1;
                if uses_conversions(text) {
                    self.conversions += 1;
                }
                match outcome.vm {
                    Ok(true) => self.vm_true += 1,
                    Ok(false) => self.vm_false += 1,
                    Err(ref e) => {
                        self.vm_err += 1;
                        *self.errors.entry(e.clone()).or_default() += 1;
                    }
                }
                if outcome.strict.is_err() && outcome.reference.is_ok() {
                    self.short_circuit_saved += 1;
                }
                if !agrees(&outcome) && self.failures.len() < 25 {
                    self.failures.push(describe(text, inputs, &outcome));
                }
            }
        }
    }

    fn summary(&self) -> String {
        format!(
            "generated {}, rejected by the checker {}, evalexpr panicked {}, compared {} \
             (vm true {}, false {}, error {}; short-circuit avoided an evalexpr error {}; \
             with int/float/str/contains {})",
            self.generated,
            self.rejected,
            self.panicked,
            self.ran,
            self.vm_true,
            self.vm_false,
            self.vm_err,
            self.short_circuit_saved,
            self.conversions
        )
    }

    fn assert_clean(&self) {
        if !self.failures.is_empty() {
            let mut report = format!(
                "{}\n{} disagreements, first ones:\n",
                self.summary(),
                self.failures.len()
            );
            for failure in &self.failures {
                let _ = writeln!(report, "{failure}");
            }
            panic!("{report}");
        }
    }
}

/// Whether `text` calls one of the conversions or the tuple `contains`.
fn uses_conversions(text: &str) -> bool {
    ["int(", "float(", "str(", "contains(("]
        .iter()
        .any(|f| text.contains(f))
}

/// The counts, shown with `--nocapture`: they say what the run covered.
#[allow(clippy::print_stderr)]
fn report(tally: &Tally) {
    eprintln!("{}", tally.summary());
    if std::env::var_os("WHEN_DIFF_ERRORS").is_some() {
        let mut errors: Vec<_> = tally.errors.iter().collect();
        errors.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
        for (message, n) in errors.iter().take(15) {
            eprintln!("{n:>7}  {message}");
        }
    }
}

#[allow(clippy::print_stderr)]
fn show(text: &str) {
    eprintln!("{text}");
}

fn strings() -> Vec<String> {
    STRINGS.iter().map(|s| s.to_string()).collect()
}

fn default_paths() -> Vec<String> {
    DATA_PATHS.iter().map(|s| s.to_string()).collect()
}

fn default_pairs() -> Vec<(String, String)> {
    STATE_PAIRS
        .iter()
        .map(|(h, f)| (h.to_string(), f.to_string()))
        .collect()
}

#[test]
fn generated_expressions_agree() {
    quiet_panics();
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md);
    // the defaults keep CI repeatable. WHEN_DIFF_SEED, the older knob, still
    // sets this test's seed unmixed.
    let fuzz = Fuzz::from_env(
        "differential::generated_expressions_agree",
        0x5C00_7E25_0000_0001,
    )
    .unwrap();
    let wanted = fuzz.cases(30_000);
    let seed = std::env::var("WHEN_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(fuzz.seed());
    let mut rng = Rng::new(seed);
    let (strings, paths, pairs) = (strings(), default_paths(), default_pairs());
    let mut tally = Tally::default();
    while tally.ran < wanted && tally.generated < 4 * wanted {
        let depth = 1 + rng.below(4) as u32;
        let text = Gen { rng: &mut rng }.expr(T::Bool, depth);
        let inputs = random_inputs(&mut rng, &strings, &paths, &pairs);
        let case = run(&text, &inputs, &paths);
        tally.record(&text, &inputs, case);
    }
    report(&tally);
    tally.assert_clean();
    assert!(
        tally.ran >= wanted,
        "too few accepted cases: {}",
        tally.summary()
    );
    // The generator must exercise every outcome, not just errors.
    assert!(
        tally.vm_true > wanted / 10 && tally.vm_false > wanted / 10 && tally.vm_err > wanted / 20,
        "{}",
        tally.summary()
    );
    assert!(tally.short_circuit_saved > 0, "{}", tally.summary());
    // docs/when-language.md#testing: at least 2,000 compared cases call
    // `int`, `float`, `str` or `contains` in every run.
    assert!(
        tally.conversions >= 2_000.min(wanted / 4),
        "{}",
        tally.summary()
    );
}

/// Hand-picked cases with the answer both evaluators must give.
#[test]
fn edge_cases_agree_with_known_answers() {
    quiet_panics();
    let error = Err(());
    let cases: &[(&str, Result<bool, ()>)] = &[
        // Failing literal-only parts are rejected by the checker (see
        // `failing_literal_parts_are_rejected`); these reach the same
        // operations through data, so the VM still meets them.
        ("data.max + 1 > 0", error),
        ("data.min - 1 < 0", error),
        ("data.root * data.root > 0", error),
        ("1 / data.zero == 0", error),
        ("1 % data.zero == 0", error),
        ("1.0 / 0 > 1e308", Ok(true)),
        ("7 / 2 == 3", Ok(true)),
        ("-7 / 2 == -3", Ok(true)),
        ("-7 % 3 == -1", Ok(true)),
        ("7 % -3 == 1", Ok(true)),
        ("7.5 % 2 == 1.5", Ok(true)),
        ("2 ^ 10 == 1024.0", Ok(true)),
        ("2 ^ -1 == 0.5", Ok(true)),
        ("-2 ^ 2 == -4.0", Ok(true)),
        // Precedence and associativity as docs/when-language.md states them:
        // `^` is left-associative in evalexpr, unlike in mathematics.
        ("2 ^ 3 ^ 2 == 64.0", Ok(true)),
        ("1 - 2 - 3 == -4", Ok(true)),
        ("12 / 2 / 3 == 2", Ok(true)),
        ("7 % 4 * 2 == 6", Ok(true)),
        ("2 * -3 == -6", Ok(true)),
        ("!true == false", Ok(true)),
        ("true || false && false", Ok(true)),
        ("0.0 / 0.0 != 0.0 / 0.0", Ok(true)),
        ("min(1, 1.0) == 1.0", Ok(true)),
        ("min(1.5, 2) == 1.5", Ok(true)),
        ("min(1e19, 2e19) == 9223372036854775807", Ok(true)),
        ("max(-1e19, -2e19) == -9223372036854775807 - 1", Ok(true)),
        ("math::abs(-3) == 3 && math::abs(-2.5) == 2.5", Ok(true)),
        (
            "floor(2.5) == 2.0 && ceil(2.5) == 3.0 && round(2.5) == 3.0 && round(-2.5) == -3.0",
            Ok(true),
        ),
        ("floor(7) == 7.0", Ok(true)),
        (r#""b" > "a" && "B" < "a" && "" < "a""#, Ok(true)),
        (r#"len("straße") == 7"#, Ok(true)),
        (r#"str::to_uppercase("straße") == "STRASSE""#, Ok(true)),
        (r#"str::trim("  x ") == "x""#, Ok(true)),
        (r#""ab" + "c" == "abc""#, Ok(true)),
        ("if(true, 1, 1 / data.zero) == 1", error),
        ("false && 1 / data.zero == 1", Ok(false)),
        ("true || 1 / data.zero == 1", Ok(true)),
        ("true && 1 / data.zero == 1", error),
        ("data.missing == data.other_missing", Ok(true)),
        (r#"data.missing == """#, Ok(false)),
        ("data.missing + 1 > 0", error),
        ("data.n == 5", Ok(true)),
        ("data.n == 5.0", Ok(false)),
        ("data.f > 4 && data.f < 5", Ok(true)),
        ("data.big > 9223372036854775807", Ok(true)),
        ("data.s + 1 == 2", error),
        (r#"data.s + "x" == "1x""#, Ok(true)),
        ("data.s < 2", error),
        ("data.flag", Ok(true)),
        ("!data.flag || data.n", error),
        ("data.flag || data.n", Ok(true)),
        ("data.n", error),
        ("data.arr == 1", error),
        ("data.obj.k == 1", Ok(true)),
        ("data.obj == 1", error),
        ("false && data.arr == 1", Ok(false)),
        (r#"state("vehicle", "state") == "parked""#, Ok(true)),
        (r#"state("vehicle", "nothing") == """#, Ok(true)),
        (r#"topic == "t" && src == "" && to == """#, Ok(true)),
        (r#"str::contains(topic, "")"#, Ok(true)),
        // Conversions and membership (docs/when-language.md#conversions).
        (r#"int(state("battery:0", "charge")) < 20"#, Ok(true)),
        (r#"int(state("vehicle", "state")) < 20"#, error),
        (
            "int(data.s) == 1 && int(data.f) == 4 && int(-data.f) == -4",
            Ok(true),
        ),
        ("int(data.big) == 0", error),
        ("int(data.flag) == 1", error),
        ("int(data.missing) == 1", error),
        (
            r#"int(data.padded) == 42 && float(data.padded) == 42.0"#,
            Ok(true),
        ),
        (r#"int(data.exp) == 1000"#, error),
        (
            r#"float(data.exp) == 1000.0 && float(data.n) == 5.0"#,
            Ok(true),
        ),
        (r#"float(data.word) > 0.0"#, error),
        (
            r#"str(data.f) == "4.5" && str(data.n) == "5" && str(data.flag) == "true""#,
            Ok(true),
        ),
        (r#"str(data.f * 0 + 2.0) == "2""#, Ok(true)),
        (r#"str(data.missing) == """#, error),
        (
            r#"contains(("parked", "stand-by"), state("vehicle", "state"))"#,
            Ok(true),
        ),
        (r#"contains(("parked", "stand-by"), to)"#, Ok(false)),
        ("contains((1, 2), data.n - 4)", Ok(true)),
        ("contains((1.0, 2), data.n - 4)", Ok(false)),
        ("contains((1, 2), data.missing)", error),
        ("contains((data.missing, 2), 2)", Ok(true)),
    ];
    let event = Event {
        topic: "t".into(),
        data: json!({
            "n": 5, "f": 4.5, "big": u64::MAX, "s": "1", "flag": true,
            "arr": [1], "obj": { "k": 1 },
            "max": i64::MAX, "min": i64::MIN, "root": 3037000500_i64, "zero": 0,
            "padded": " 42 ", "exp": "1e3", "word": "inf",
        })
        .into(),
        ..Event::default()
    };
    let inputs = Inputs {
        event,
        state: HashMap::from([
            (
                ("vehicle".to_string(), "state".to_string()),
                "parked".to_string(),
            ),
            (
                ("battery:0".to_string(), "charge".to_string()),
                "19".to_string(),
            ),
        ]),
    };
    let paths: Vec<String> = [
        "padded",
        "exp",
        "word",
        "missing",
        "other_missing",
        "n",
        "f",
        "big",
        "s",
        "flag",
        "arr",
        "obj",
        "obj.k",
        "max",
        "min",
        "root",
        "zero",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut problems = String::new();
    for (text, want) in cases {
        let outcome = match run(text, &inputs, &paths) {
            Case::Ran(outcome) => outcome,
            Case::Rejected => {
                let _ = writeln!(
                    problems,
                    "rejected by the checker: {text}: {:?}",
                    check(text).err()
                );
                continue;
            }
            Case::ReferencePanicked => {
                let _ = writeln!(problems, "evalexpr panicked: {text}");
                continue;
            }
        };
        if !agrees(&outcome) {
            problems.push_str(&describe(text, &inputs, &outcome));
        } else if outcome.vm.clone().map_err(|_| ()) != *want {
            let _ = writeln!(
                problems,
                "{text}: want {want:?}, both gave {:?}",
                outcome.vm
            );
        }
    }
    assert!(problems.is_empty(), "{problems}");
}

/// A part that reads no event data and fails in evalexpr fails on every
/// event (evalexpr evaluates every argument): the checker rejects it, at
/// the innermost failing part, wherever it sits.
#[test]
fn failing_literal_parts_are_rejected() {
    let cases: &[(&str, &str)] = &[
        ("9223372036854775807 + 1 > 0", "9223372036854775807 + 1"),
        ("-9223372036854775807 - 2 < 0", "-9223372036854775807 - 2"),
        ("3037000500 * 3037000500 > 0", "3037000500 * 3037000500"),
        ("1 / 0 == 0", "1 / 0"),
        ("1 % 0 == 0", "1 % 0"),
        ("if(true, 1, 1 / 0) == 1", "1 / 0"),
        ("if(data.n > 5, 1, 1 / 0) == 1", "1 / 0"),
        ("false && 1 / 0 == 1", "1 / 0"),
        ("true || (1 / 0 == 1)", "1 / 0"),
        (
            "math::abs(-9223372036854775807 - 1) > data.n",
            "math::abs(-9223372036854775807 - 1)",
        ),
        // A conversion of a literal that cannot convert.
        (r#"int("12abc") > data.n"#, r#"int("12abc")"#),
        ("int(1e19) > data.n", "int(1e19)"),
        (r#"float("inf") > data.f"#, r#"float("inf")"#),
    ];
    for (text, part) in cases {
        let problems = check(text)
            .err()
            .unwrap_or_else(|| panic!("accepted: {text}"));
        assert_eq!(problems.len(), 1, "{text}: {problems:?}");
        assert_eq!(problems[0].code, "rulec::when::always-fails", "{text}");
        assert_eq!(&text[problems[0].span.clone()], *part, "{text}");
    }
    // Literal-only parts that evaluate are fine, floats divide by zero.
    for text in [
        "(1 + 2) * 3 == 9",
        "1.0 / 0 > 1e308",
        "7 % -3 == 1",
        "data.n > 2 ^ 2",
        r#"int(" 42 ") == data.n"#,
        r#"str(2.5) == "2.5" && contains(("a", "b"), to)"#,
    ] {
        assert!(check(text).is_ok(), "{text}: {:?}", check(text).err());
    }
}

/// The double-quoted strings in an expression: fixture inputs use them so
/// that comparisons are sometimes true.
fn string_literals(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '"' {
            let mut s = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => s.extend(chars.next()),
                    c => s.push(c),
                }
            }
            out.push(s);
        }
    }
    out
}

/// The `data.*` paths a checked expression reads, joined with dots.
fn data_paths(text: &str) -> Vec<String> {
    fn walk(expr: &Expr, out: &mut Vec<String>) {
        match &expr.kind {
            ExprKind::Data(path) => {
                let joined = path.join(".");
                if !out.contains(&joined) {
                    out.push(joined);
                }
            }
            ExprKind::Unary(_, inner) => walk(inner, out),
            ExprKind::Binary(_, left, right) => {
                walk(left, out);
                walk(right, out);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|arg| walk(arg, out)),
            ExprKind::Lit(_) | ExprKind::Field(_) | ExprKind::State(_) => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(checked) = check(text) {
        walk(&checked.expr, &mut out);
    }
    out
}

fn fixture_whens() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rules");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        // A fixture that is not valid TOML is some other test's business.
        let Ok(doc) = text.parse::<toml::Table>() else {
            continue;
        };
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let rules = doc
            .get("rule")
            .and_then(|r| r.as_array())
            .cloned()
            .unwrap_or_default();
        for rule in &rules {
            let mut push = |table: &toml::Value| {
                if let Some(when) = table.get("when").and_then(|w| w.as_str()) {
                    out.push((name.clone(), when.to_string()));
                }
            };
            push(rule);
            for step in rule
                .get("step")
                .and_then(|s| s.as_array())
                .into_iter()
                .flatten()
            {
                push(step);
            }
        }
    }
    out
}

#[test]
fn fixture_expressions_agree() {
    quiet_panics();
    let whens = fixture_whens();
    let fuzz = Fuzz::from_env(
        "differential::fixture_expressions_agree",
        0x5C00_7E25_0000_0002,
    )
    .unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let mut tally = Tally::default();
    for (_file, text) in &whens {
        let mut strings = strings();
        strings.extend(string_literals(text));
        let paths = data_paths(text);
        let pairs: Vec<(String, String)> = match check(text) {
            Ok(checked) => checked
                .state_pairs
                .iter()
                .map(|p| (p.hash.clone(), p.field.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        for _ in 0..fuzz.cases(200) {
            let inputs = random_inputs(&mut rng, &strings, &paths, &pairs);
            let case = run(text, &inputs, &paths);
            tally.record(text, &inputs, case);
        }
    }
    report(&tally);
    tally.assert_clean();
    assert!(tally.ran >= whens.len() * 100, "{}", tally.summary());
}

/// Random token soup: whatever odd text the checker accepts (evalexpr's
/// parser takes many surprising forms) must still evaluate the same.
#[test]
fn accepted_token_soup_agrees() {
    quiet_panics();
    // Operands and operators alternate, with a random piece now and then,
    // so that many soups type-check.
    const OPERANDS: &[&str] = &[
        "topic",
        "to",
        "data.a",
        "data.o.x",
        "\"a\"",
        "\"\"",
        "1",
        "0",
        "2.5",
        "true",
        "false",
        "(",
        "!",
        "-",
        "len",
        "min (",
        "max (",
        "if (",
        "floor",
        "math::abs",
        "str::trim",
        "str::contains (",
    ];
    const OPERATORS: &[&str] = &[
        "==", "!=", "<", ">=", "&&", "||", "+", "-", "*", "/", "%", "^", ",", ")", "/*c*/",
    ];
    const ANY: &[&str] = &["(", ")", ",", " ", "!", "-", "true", "data.a", "==", "&&"];
    let fuzz = Fuzz::from_env(
        "differential::accepted_token_soup_agrees",
        0x5C00_7E25_0000_0003,
    )
    .unwrap();
    let wanted = fuzz.cases(1_500);
    let mut rng = Rng::new(fuzz.seed());
    let (strings, paths, pairs) = (strings(), default_paths(), default_pairs());
    let mut tally = Tally::default();
    let mut tried = 0;
    let mut seen = std::collections::HashSet::new();
    while tally.ran < wanted && tried < fuzz.cases(1_000_000) {
        tried += 1;
        let len = 1 + rng.below(12);
        let mut text = String::new();
        for i in 0..len {
            let pool = if rng.one_in(7) {
                ANY
            } else if i % 2 == 0 {
                OPERANDS
            } else {
                OPERATORS
            };
            let piece: &&str = rng.pick(pool);
            text.push_str(piece);
            if !rng.one_in(5) {
                text.push(' ');
            }
        }
        if check(&text).is_err() || !seen.insert(text.trim().to_string()) {
            continue;
        }
        if std::env::var_os("WHEN_SOUP_SHOW").is_some() && tally.ran < 60 {
            show(&text);
        }
        // Glued names such as `data.atopic` are paths too.
        let mut paths = paths.clone();
        paths.extend(data_paths(&text));
        for _ in 0..3 {
            let inputs = random_inputs(&mut rng, &strings, &paths, &pairs);
            let case = run(&text, &inputs, &paths);
            tally.record(&text, &inputs, case);
        }
    }
    report(&tally);
    tally.assert_clean();
    assert!(tally.ran >= wanted, "{}", tally.summary());
}

/// As the bundle builder does it: many expressions share one pool whose
/// state pairs are registered sorted up front; each program must still
/// evaluate as evalexpr does against the final constants and pair list.
#[test]
fn shared_pool_agrees() {
    quiet_panics();
    let fuzz = Fuzz::from_env("differential::shared_pool_agrees", 0x5C00_7E25_0000_0004).unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let (strings, paths, pairs) = (strings(), default_paths(), default_pairs());
    let mut texts = Vec::new();
    let mut checked = Vec::new();
    while checked.len() < fuzz.cases(500) {
        let depth = 1 + rng.below(4) as u32;
        let text = Gen { rng: &mut rng }.expr(T::Bool, depth);
        if let Ok(c) = check(&text) {
            texts.push(text);
            checked.push(c);
        }
    }
    let mut pool =
        ConstPool::with_state_pairs(checked.iter().flat_map(|c| c.state_pairs.iter().cloned()));
    let programs: Vec<Program> = checked.iter().map(|c| lower(c, &mut pool)).collect();
    let (consts, state_pairs) = pool.finish();
    let mut sorted = state_pairs.clone();
    sorted.sort();
    assert_eq!(state_pairs, sorted, "state pairs must stay sorted");
    let mut tally = Tally::default();
    for (text, program) in texts.iter().zip(&programs) {
        for _ in 0..4 {
            let inputs = random_inputs(&mut rng, &strings, &paths, &pairs);
            let case = run_compiled(text, program, &consts, &state_pairs, &inputs, &paths);
            tally.record(text, &inputs, case);
        }
    }
    report(&tally);
    tally.assert_clean();
    assert!(tally.ran >= fuzz.cases(1_900), "{}", tally.summary());
}
