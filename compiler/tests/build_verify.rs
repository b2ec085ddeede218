//! The compiler and the bundle verifier agree (docs/bundle.md): every `when`
//! the checker accepts lowers to a program the verifier accepts, so that
//! `rulec build` never writes a bundle the runtime would refuse. Generated
//! expressions mix every type with every operator and built-in, so the
//! checker's and the verifier's static typing meet at their edges.

use rulec::when::{check, lower, ConstPool};
use rulecore::verify::verify_program;
use test_kit::fuzz::{Fuzz, Rng};

const ATOMS: &[&str] = &[
    "to",
    "topic",
    "src",
    "from",
    "data.a",
    "data.b.c",
    r#"state("vehicle", "state")"#,
    r#""parked""#,
    r#""""#,
    "1",
    "0",
    "2.5",
    "true",
    "false",
];
const BINARY: &[&str] = &[
    "+", "-", "*", "/", "%", "^", "==", "!=", "<", "<=", ">", ">=", "&&", "||",
];
const UNARY: &[&str] = &["!", "-"];
const CALLS: &[(&str, usize)] = &[
    ("len", 1),
    ("str::to_lowercase", 1),
    ("str::to_uppercase", 1),
    ("str::trim", 1),
    ("min", 2),
    ("max", 3),
    ("if", 3),
    ("floor", 1),
    ("ceil", 1),
    ("round", 1),
    ("math::abs", 1),
    ("str::starts_with", 2),
    ("str::ends_with", 2),
    ("str::contains", 2),
];

fn expr(rng: &mut Rng, depth: usize) -> String {
    if depth == 0 {
        return rng.pick(ATOMS).to_string();
    }
    match rng.below(6) {
        0 => rng.pick(ATOMS).to_string(),
        1 => format!("{}({})", rng.pick(UNARY), expr(rng, depth - 1)),
        2 => {
            let (name, arity) = CALLS[rng.below(CALLS.len())];
            let args: Vec<String> = (0..arity).map(|_| expr(rng, depth - 1)).collect();
            format!("{name}({})", args.join(", "))
        }
        _ => format!(
            "({} {} {})",
            expr(rng, depth - 1),
            rng.pick(BINARY),
            expr(rng, depth - 1)
        ),
    }
}

#[test]
fn every_accepted_when_verifies() {
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = Fuzz::from_env("build_verify::every_accepted_when_verifies", 0x5eed).unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let mut accepted = 0;
    for _ in 0..fuzz.cases(60_000) {
        let depth = 1 + rng.below(4);
        // Comparing with a boolean context makes more of them type-check.
        let text = match rng.below(3) {
            0 => expr(&mut rng, depth),
            1 => format!("{} == {}", expr(&mut rng, depth), expr(&mut rng, depth)),
            _ => format!("{} && {}", expr(&mut rng, depth), expr(&mut rng, depth)),
        };
        let Ok(checked) = check(&text) else {
            continue;
        };
        accepted += 1;
        let mut pool = ConstPool::with_state_pairs(checked.state_pairs.iter().cloned());
        let program = lower(&checked, &mut pool);
        let (consts, pairs) = pool.finish();
        if let Err(error) = verify_program(&program, &consts, pairs.len()) {
            panic!("the checker accepts `{text}`, the verifier refuses it: {error}\n{program:?}");
        }
    }
    // The generator must reach the interesting part of the space.
    assert!(accepted > 2_000, "only {accepted} expressions type-checked");
}
