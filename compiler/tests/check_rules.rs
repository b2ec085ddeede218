//! What validation hands to `build`: the `CheckedRule`s of small rule sets,
//! field by field (defaults, units, CAN frames, disabled rules, order).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::check::CheckReport;
use rulec::diagnostic::Severity;
use rulec::session::Session;
use rulec::validate::CheckedRule;
use rulecore::bundle::{Action, CanFrame, Concurrency, Repeat};
use rulecore::TopicPattern;

const S: u64 = 1_000_000_000;

fn check(files: &[(&str, &str)]) -> CheckReport {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    Session::new(None).check(dir.path()).unwrap()
}

fn rule<'a>(report: &'a CheckReport, name: &str) -> &'a CheckedRule {
    report
        .rules
        .iter()
        .find(|rule| rule.name == name)
        .unwrap_or_else(|| panic!("no rule {name}: {:#?}", report.diagnostics))
}

#[test]
fn the_alarm_rule_as_build_sees_it() {
    let report = Session::new(None)
        .check(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rules"))
        .unwrap();
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    let hazards = rule(&report, "hazards-on-alarm");
    assert_eq!(hazards.source, "10-alarm.toml");
    assert!(hazards.enabled);
    assert_eq!(hazards.on, [TopicPattern::Exact("alarm.triggered".into())]);
    assert_eq!(
        hazards.cancel_on,
        [TopicPattern::Exact("alarm.disarmed".into())]
    );
    assert_eq!(hazards.concurrency, Concurrency::Restart);
    assert_eq!(
        hazards.repeat,
        Repeat {
            count: 1,
            every_ns: 0,
            period_ns: 0
        }
    );
    assert_eq!((hazards.cooldown_ns, hazards.debounce_ns), (0, 0));
    assert!(hazards.when.is_none());
    assert_eq!(hazards.steps.len(), 2);
    assert_eq!(
        hazards.steps[0].action,
        Action::redis("scooter:blinker", "both")
    );
    assert_eq!(
        (hazards.steps[0].after_ns, hazards.steps[0].durable),
        (0, false)
    );
    assert_eq!(
        hazards.steps[1].action,
        Action::redis("scooter:blinker", "off")
    );
    // `durable` defaults to true once `after` > 0.
    assert_eq!(
        (hazards.steps[1].after_ns, hazards.steps[1].durable),
        (30 * S, true)
    );

    let horn = rule(&report, "alarm-horn-pulses");
    assert_eq!(horn.concurrency, Concurrency::Drop);
    assert_eq!(
        horn.repeat,
        Repeat {
            count: 3,
            every_ns: 2 * S,
            period_ns: 0
        }
    );
    assert_eq!(
        (horn.steps[1].after_ns, horn.steps[1].durable),
        (300_000_000, false)
    );

    let battery = rule(&report, "low-battery-warning");
    assert_eq!(
        battery.on,
        [TopicPattern::Exact("battery.charge.changed".into())]
    );
    assert_eq!((battery.debounce_ns, battery.cooldown_ns), (5 * S, 600 * S));
    let when = battery.when.as_ref().unwrap();
    assert_eq!(
        when.source,
        r#"int(to) < 15 && state("vehicle", "state") == "ready-to-drive""#
    );
    assert_eq!(when.checked.state_pairs.len(), 1);

    let log = rule(&report, "battery-state-log");
    assert_eq!(log.concurrency, Concurrency::Queue);
    assert_eq!(
        log.steps[0].action,
        Action::Exec {
            command: "/usr/local/bin/log-battery-state".into(),
            timeout_ns: 5 * S
        }
    );

    let winter = rule(&report, "winter-seat-heater");
    assert!(!winter.enabled, "a disabled rule is kept, as replay-only");
    // The exec timeout defaults to 10 s.
    assert_eq!(
        winter.steps[0].action,
        Action::Exec {
            command: "/usr/local/bin/seat-heater".into(),
            timeout_ns: 10 * S
        }
    );
    assert_eq!(winter.steps[1].after_ns, 15 * 60 * S);
}

#[test]
fn can_frames() {
    let report = Session::new(None)
        .check(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rules"))
        .unwrap();
    let blink = rule(&report, "parked-brake-blink");
    assert_eq!(
        blink.steps[0].action,
        Action::Can(CanFrame {
            iface: "can0".into(),
            id: 0x3A1,
            extended: false,
            rtr: false,
            dlc: 4,
            data: vec![0x01, 0xFF, 0x00, 0x00],
        })
    );
    assert_eq!(
        blink.steps[1].action,
        Action::Can(CanFrame {
            iface: "can0".into(),
            id: 0x18FF_50E5,
            extended: true,
            rtr: false,
            dlc: 2,
            data: vec![0, 0],
        })
    );
    let ask = rule(&report, "ask-bms-status");
    assert_eq!(
        ask.steps[0].action,
        Action::Can(CanFrame {
            iface: "can0".into(),
            id: 0x7E0,
            extended: false,
            rtr: true,
            dlc: 8,
            data: vec![],
        })
    );
}

const STEP: &str = "[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p\"\n";

fn named(name: &str, extra: &str) -> String {
    format!("[[rule]]\nname = \"{name}\"\non = [\"t\"]\n{extra}{STEP}")
}

#[test]
fn bundle_order_is_file_order_then_position() {
    let report = check(&[
        ("b.toml", &format!("{}{}", named("b1", ""), named("b2", ""))),
        ("a.toml", &named("a1", "")),
    ]);
    let names: Vec<&str> = report.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a1", "b1", "b2"]);
    assert_eq!(report.rules_read, 3);
}

#[test]
fn an_error_rejects_only_its_rule() {
    let report = check(&[(
        "a.toml",
        &format!(
            "{}{}",
            named("bad", "cooldown = \"-1s\"\n"),
            named("good", "")
        ),
    )]);
    let names: Vec<&str> = report.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    assert_eq!(report.errors(), 1);
}

#[test]
fn a_failed_rule_claims_no_name() {
    let report = check(&[
        ("a.toml", &named("x", "cooldown = \"nope\"\n")),
        ("b.toml", &named("x", "")),
    ]);
    assert_eq!(report.rules.len(), 1);
    assert_eq!(report.rules[0].source, "b.toml");
    assert_eq!(report.errors(), 1);
    assert_eq!(report.diagnostics[0].code, "rulec::duration");
}

#[test]
fn a_disabled_rule_claims_no_name_over_an_enabled_one() {
    let report = check(&[
        ("a.toml", &named("x", "enabled = false\n")),
        ("b.toml", &named("x", "")),
        ("c.toml", &named("y", "enabled = false\n")),
        ("d.toml", &named("y", "enabled = false\n")),
    ]);
    let kept: Vec<(&str, bool)> = report
        .rules
        .iter()
        .map(|r| (r.source.as_str(), r.enabled))
        .collect();
    assert_eq!(kept, [("b.toml", true), ("c.toml", false)]);
    assert_eq!(report.errors(), 0);
    assert_eq!(report.warnings(), 2);
    assert!(report
        .diagnostics
        .iter()
        .all(|d| d.code == "rulec::disabled-duplicate-name" && d.severity == Severity::Warning));
}

#[test]
fn a_disabled_rule_with_errors_is_left_out_with_warnings() {
    let report = check(&[(
        "a.toml",
        &named("x", "enabled = false\ndebounce = \"0s\"\n"),
    )]);
    assert!(report.rules.is_empty());
    assert_eq!((report.errors(), report.warnings()), (0, 1));
    assert!(!report.failed(false));
    assert!(report.failed(true));
}

#[test]
fn zero_cooldown_means_none() {
    let report = check(&[("a.toml", &named("x", "cooldown = \"0s\"\n"))]);
    assert_eq!(report.rules[0].cooldown_ns, 0);
    assert!(report.diagnostics.is_empty());
}

#[test]
fn a_when_error_span_lands_inside_the_string_in_the_file() {
    let text = named("x", "when = \"to == \\\"a\\\" && spede > 1\"\n");
    let report = check(&[("a.toml", &text)]);
    let diagnostic = report
        .diagnostics
        .iter()
        .find(|d| d.code.as_str().starts_with("rulec::when::"))
        .unwrap_or_else(|| panic!("{:#?}", report.diagnostics));
    let span = diagnostic.label.as_ref().unwrap().span.clone();
    assert_eq!(&text[span], "spede");
    assert_eq!(diagnostic.rule.as_deref(), Some("x"));
    assert_eq!(diagnostic.step, None);
}

#[test]
fn a_disabled_rule_that_failed_claims_no_name() {
    // docs/rules.md#errors-and-warnings, docs/rules.md#disabled-rules: the disabled rule is left out for its error, so the
    // enabled rule keeps the name with no duplicate-name warning.
    let report = check(&[
        (
            "a.toml",
            &named("x", "enabled = false\ncooldown = \"-1s\"\n"),
        ),
        ("b.toml", &named("x", "")),
    ]);
    let kept: Vec<(&str, bool)> = report
        .rules
        .iter()
        .map(|r| (r.source.as_str(), r.enabled))
        .collect();
    assert_eq!(kept, [("b.toml", true)]);
    let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["rulec::duration-range"]);
    assert_eq!(report.diagnostics[0].severity, Severity::Warning);
}

#[test]
fn cancel_on_equal_to_on_warns_only_under_restart() {
    let same = "cancel-on = [\"t\"]\n";
    for (policy, warns) in [
        ("", true),
        ("concurrency = \"restart\"\n", true),
        ("concurrency = \"queue\"\n", false),
        ("concurrency = \"drop\"\n", false),
    ] {
        let report = check(&[("a.toml", &named("x", &format!("{policy}{same}")))]);
        let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        let expected: &[&str] = if warns {
            &["rulec::redundant-cancel-on"]
        } else {
            &[]
        };
        assert_eq!(codes, expected, "{policy:?}");
        assert_eq!(report.rules.len(), 1, "a warning rejects nothing");
    }
}

#[test]
fn exec_command_is_one_program() {
    let exec = |command: &str| {
        format!(
            "[[rule]]\nname = \"x\"\non = [\"t\"]\n[[rule.step]]\ndo = \"exec\"\ncommand = \"{command}\"\n"
        )
    };
    for ok in ["lights-off", "/usr/local/bin/lights-off"] {
        let report = check(&[("a.toml", &exec(ok))]);
        assert!(
            report.diagnostics.is_empty(),
            "{ok}: {:#?}",
            report.diagnostics
        );
    }
    // Compiles, but is found from ruled's working directory: a warning.
    for relative in ["./bin/x", "bin/x"] {
        let report = check(&[("a.toml", &exec(relative))]);
        assert_eq!(report.rules.len(), 1, "{relative}");
        let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        assert_eq!(codes, ["rulec::exec-relative-path"], "{relative}");
    }
    for bad in ["systemctl restart lights", "x\\ty", "/bin/x\\u0000"] {
        let report = check(&[("a.toml", &exec(bad))]);
        assert!(report.rules.is_empty(), "{bad}");
        let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        assert_eq!(codes, ["rulec::exec-arguments"], "{bad}");
    }
}

#[test]
fn every_and_debounce_rules() {
    let cases = [
        ("repeat = { count = 2, every = \"1s\" }\n", &[][..]),
        ("repeat = { count = 1 }\n", &[][..]),
        ("repeat = {}\n", &["rulec::repeat"][..]),
        ("repeat = { count = 2 }\n", &["rulec::repeat"][..]),
        (
            "repeat = { count = 2, every = \"-1s\" }\n",
            &["rulec::repeat"][..],
        ),
        (
            "repeat = { count = 1, every = \"1s\" }\n",
            &["rulec::repeat-every-unused"][..],
        ),
        ("debounce = \"1ms\"\n", &[][..]),
        ("debounce = \"0\"\n", &["rulec::duration-range"][..]),
        ("cooldown = \"0\"\n", &[][..]),
        ("cooldown = \"-1ns\"\n", &["rulec::duration-range"][..]),
    ];
    for (extra, expected) in cases {
        let report = check(&[("a.toml", &named("x", extra))]);
        let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        assert_eq!(codes, expected, "{extra}");
        let rejected = report.errors() > 0;
        assert_eq!(report.rules.is_empty(), rejected, "{extra}");
    }
}

#[test]
fn every_problem_of_a_can_step_is_reported_at_once() {
    let text = "[[rule]]\nname = \"x\"\non = [\"t\"]\n[[rule.step]]\ndo = \"can\"\niface = \"can/0\"\nid = \"0x\"\ndata = \"01\"\ndlc = 1\n";
    let report = check(&[("a.toml", text)]);
    let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(
        codes,
        ["rulec::can-iface", "rulec::can-id", "rulec::can-dlc"],
        "{:#?}",
        report.diagnostics
    );
    assert!(report.rules.is_empty());
}

#[test]
fn spans_are_exact_in_crlf_files_and_multiline_strings() {
    let text = "[[rule]]\r\nname = \"x\"\r\non = [\"t\"]\r\nwhen = \"\"\"\\\r\n    to == \"a\" && \\\r\n    spede > 1\"\"\"\r\n[[rule.step]]\r\ndo = \"redis\"\r\nlist = \"l\"\r\npush = \"p\"\r\n";
    let report = check(&[("a.toml", text)]);
    assert_eq!(report.diagnostics.len(), 1, "{:#?}", report.diagnostics);
    let span = report.diagnostics[0].label.as_ref().unwrap().span.clone();
    assert_eq!(&text[span.clone()], "spede");
    let json = rulec::diagnostic::to_json(&report.diagnostics[0], &report.files);
    assert_eq!(
        (json["line"].as_u64(), json["column"].as_u64()),
        (Some(6), Some(5))
    );
}

#[test]
fn a_bad_repeat_count_does_not_hide_a_bad_every() {
    let report = check(&[(
        "a.toml",
        &named("x", "repeat = { count = 0, every = \"5 sec\" }\n"),
    )]);
    let codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["rulec::repeat", "rulec::duration"]);
}

/// `from` of a derived topic is whatever the field held before,
/// also a value that emits nothing: battery `charge` going 80 -> n/a -> 77
/// derives `battery.charge.changed` with `from = "n/a"`, so the checker
/// must not call `from == "n/a"` never true.
#[test]
fn from_may_be_anything_the_field_held() {
    use rulec::profile::{load, ProfileChoice};
    let profile = load(&ProfileChoice::Builtin)
        .unwrap()
        .map(std::sync::Arc::new);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("charge.toml"),
        "[[rule]]\nname = \"charge-back\"\non = [\"battery.charge.changed\"]\nwhen = 'from == \"n/a\" && int(to) < 80'\n\n[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"both\"\n",
    )
    .unwrap();
    let report = rulec::session::Session::new(profile)
        .check(dir.path())
        .unwrap();
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    assert_eq!(report.rules.len(), 1);
}
