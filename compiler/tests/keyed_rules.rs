//! `per` (docs/rules.md#keyed-runs) and `repeat.period`
//! (docs/rules.md#repeat) as `rulec check` sees them: what a good rule
//! gives `build`, and each mistake's code, place and words.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::check::CheckReport;
use rulec::diagnostic::{Code, Diagnostic, Severity};
use rulec::session::Session;
use rulecore::bundle::Repeat;

const S: u64 = 1_000_000_000;

fn check(rule: &str) -> (String, CheckReport) {
    let text = format!(
        "[[rule]]\nname = \"r\"\non = [\"battery.charge.changed\"]\n{rule}\n\
         [[rule.step]]\ndo = \"redis\"\nlist = \"scooter:led\"\npush = \"low\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), &text).unwrap();
    (text, Session::new(None).check(dir.path()).unwrap())
}

/// The one diagnostic with `code`, and the text its label points at.
fn one<'r>(text: &str, report: &'r CheckReport, code: Code) -> (&'r Diagnostic, String) {
    let found: Vec<&Diagnostic> = report
        .diagnostics
        .iter()
        .filter(|d| d.code == code)
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", report.diagnostics);
    let label = found[0].label.as_ref().unwrap();
    (found[0], text[label.span.clone()].to_string())
}

#[test]
fn a_keyed_rule_carries_its_expression_to_build() {
    let (_, report) = check("per = \"data.slot\"\ncooldown = \"10m\"\nwhen = 'int(to) < 10'");
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    let per = report.rules[0].per.as_ref().unwrap();
    assert_eq!(per.text(), "data.slot");
    let payload = report.assemble("test");
    let program = payload.rules[0].per().unwrap();
    assert!(!program.ops.is_empty());
    // Any type: a computed key is fine too.
    let (_, report) = check("per = 'str(data.slot) + \"-\" + from'");
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
}

#[test]
fn per_reading_state_is_an_error_at_the_call() {
    let (text, report) = check(r#"per = 'state("battery:0", "charge")'"#);
    let (diagnostic, at) = one(&text, &report, Code::Per);
    assert_eq!(diagnostic.severity, Severity::Error);
    assert!(diagnostic.message.contains("state()"), "{diagnostic:?}");
    assert_eq!(at, r#"state("battery:0", "charge")"#);
    assert!(report.rules.is_empty(), "the rule is rejected");
}

#[test]
fn a_bad_per_expression_is_pointed_at_inside_the_string() {
    let (text, report) = check("per = \"data.slot +\"");
    let errors: Vec<&Diagnostic> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    assert!(!errors.is_empty(), "{:#?}", report.diagnostics);
    let span = errors[0].label.as_ref().unwrap().span.clone();
    let value = text.find("data.slot +").unwrap();
    assert!(
        span.start >= value && span.end <= value + "data.slot +\"".len(),
        "{span:?} in {text}"
    );
    assert!(report.rules.is_empty());
    let (text, report) = check("per = \"\"");
    let (_, at) = one(&text, &report, Code::Per);
    assert_eq!(at, "\"\"");
}

#[test]
fn a_constant_per_is_a_warning() {
    let (text, report) = check("per = '\"all\"'");
    let (diagnostic, at) = one(&text, &report, Code::PerConstant);
    assert_eq!(diagnostic.severity, Severity::Warning);
    assert_eq!(at, "'\"all\"'");
    assert_eq!(report.rules.len(), 1);
}

#[test]
fn repeat_period_is_read_beside_every() {
    let (_, report) = check("repeat = { count = 4, period = \"1s\" }");
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    assert_eq!(report.rules[0].repeat, Repeat::period(4, S));
    let (_, report) = check("repeat = { count = 4, every = \"1s\" }");
    assert_eq!(report.rules[0].repeat, Repeat::every(4, S));
}

#[test]
fn repeat_with_every_and_period_is_an_error_naming_both() {
    let (text, report) = check("repeat = { count = 4, every = \"1s\", period = \"1s\" }");
    let (diagnostic, at) = one(&text, &report, Code::Repeat);
    assert!(diagnostic.message.contains("both"), "{diagnostic:?}");
    assert_eq!(at, "\"1s\"");
    assert_eq!(diagnostic.related.len(), 1);
    assert!(report.rules.is_empty());
}

#[test]
fn repeat_period_must_be_positive_and_is_unused_with_one_pass() {
    let (text, report) = check("repeat = { count = 4, period = \"0s\" }");
    let (diagnostic, at) = one(&text, &report, Code::Repeat);
    assert!(
        diagnostic.message.contains("repeat.period"),
        "{diagnostic:?}"
    );
    assert_eq!(at, "\"0s\"");
    let (text, report) = check("repeat = { count = 4 }");
    let (diagnostic, _) = one(&text, &report, Code::Repeat);
    assert!(
        diagnostic.message.contains("`every` or `period`"),
        "{diagnostic:?}"
    );
    let (text, report) = check("repeat = { count = 1, period = \"1s\" }");
    let (diagnostic, _) = one(&text, &report, Code::RepeatEveryUnused);
    assert!(
        diagnostic.message.contains("repeat.period"),
        "{diagnostic:?}"
    );
    assert_eq!(report.rules[0].repeat, Repeat::ONCE);
}
