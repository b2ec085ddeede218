//! Constant parts of a `when` that fail on every event (docs/when-language.md):
//! `1 / 0`, an int overflow of literals. They read no event data, so
//! evalexpr, the authority on what fails, evaluates them here at compile
//! time.

use super::{problem, FUNCTIONS};
use crate::diagnostic::Code;
use crate::when::spans::SpanTree;
use crate::when::WhenProblem;
use evalexpr::{
    ContextWithMutableFunctions, DefaultNumericTypes, HashMapContext, Node, Operator, Value,
};

/// Finds the parts that read no event data and fail anyway (`1 / 0`, an
/// int overflow of literals, `math::abs` of the smallest int): they fail on
/// every event that reaches them. evalexpr is the authority on what fails,
/// so each such part is evaluated with it; evalexpr evaluates every argument
/// (no short cut through `&&`, `||` or `if`), so a failing part anywhere
/// fails the whole `when` there (the VM short-circuits `&&`/`||` only).
/// Reports the innermost failing part; returns whether `node` is constant.
pub(super) fn constant_failures(
    text: &str,
    node: &Node,
    spans: &SpanTree,
    context: &ConstantContext,
    problems: &mut Vec<WhenProblem>,
) -> bool {
    let mut constant = match node.operator() {
        Operator::VariableIdentifierRead { .. } => false,
        // `state(...)` reads the store; the others are evalexpr built-ins.
        Operator::FunctionIdentifier { identifier } => {
            FUNCTIONS.iter().any(|(name, _)| name == identifier)
        }
        _ => true,
    };
    let before = problems.len();
    for (kid, kid_spans) in node.children().iter().zip(&spans.kids) {
        constant &= constant_failures(text, kid, kid_spans, context, problems);
    }
    if constant && problems.len() == before {
        // evalexpr's `math::abs` takes `i64::abs`, which panics (debug) or
        // wraps (release) on the smallest int; the VM says overflow.
        let abs_of_min = matches!(
            node.operator(),
            Operator::FunctionIdentifier { identifier } if identifier == "math::abs"
        ) && node
            .children()
            .first()
            .is_some_and(|arg| matches!(arg.eval_with_context(context), Ok(Value::Int(i64::MIN))));
        let failure = if abs_of_min {
            Some(format!(
                "the absolute value of {} does not fit an int",
                i64::MIN
            ))
        } else {
            node.eval_with_context(context)
                .err()
                .map(|error| error.to_string())
        };
        if let Some(error) = failure {
            let written = text.get(spans.span.clone()).unwrap_or("").trim();
            // evalexpr writes a function's own message as "Error: ...".
            let error = error.strip_prefix("Error: ").unwrap_or(&error);
            let conversion = matches!(
                node.operator(),
                Operator::FunctionIdentifier { identifier } if identifier == "int" || identifier == "float"
            );
            let help = if conversion {
                "`int` reads a decimal integer (\"19\", \" 19 \"), `float` a decimal number \
                 (\"2.5\"); write a number as a number literal, and convert only values that \
                 come from the event or state()"
            } else {
                "fix or remove this part: evalexpr evaluates every argument (both \
                 branches of `if` too), so it fails the `when` on every event; the VM \
                 skips only the side of `&&`/`||` that the other side already decides"
            };
            problems.push(problem(
                Code::WhenAlwaysFails,
                format!("`{written}` fails whenever it is evaluated: {error}"),
                spans.span.clone(),
                "reads no event data and always fails".into(),
                Some(help.into()),
            ));
        }
    }
    constant
}

pub(super) type ConstantContext = HashMapContext<DefaultNumericTypes>;

/// What evalexpr needs to evaluate a constant part: its own built-ins, and
/// ours ([`crate::when::reference`]: the string tests and the conversions),
/// which are not among them (docs/when-language.md#functions). Without them
/// a constant `str::contains("ab", "b")` would "fail" with evalexpr's "not
/// bound" error. No variables: a constant part reads none.
pub(super) fn constant_context() -> ConstantContext {
    let mut context = ConstantContext::new();
    for (name, function) in crate::when::reference::functions() {
        // A plain HashMapContext accepts every function; were that ever to
        // change, the call would stay unbound and be reported, not hidden.
        if let Err(error) = context.set_function(name.to_string(), function) {
            debug_assert!(false, "{name}: {error}");
        }
    }
    context
}
