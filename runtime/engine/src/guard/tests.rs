use super::*;
use rulecore::bundle::{Rule, StatePair, Step};
use rulecore::envelope::{Cover, DeclaredIn, Guard, Target};

/// A payload with one guard on `scooter:hardware handlebar:lock`:
/// `state("engine-ecu", "speed") == "0"`.
fn payload() -> Payload {
    use rulecore::bytecode::{Const, Op, Program};
    let rule = Rule::new(
        "r",
        "a.toml",
        vec![rulecore::TopicPattern::parse("a").unwrap()],
        vec![Step::new(
            Action::redis("scooter:hardware", "handlebar:lock"),
            0,
        )],
    );
    let mut payload = Payload::new(
        "test",
        vec![rule],
        vec![StatePair {
            hash: "engine-ecu".into(),
            field: "speed".into(),
        }],
        vec![Const::Str("0".into())],
    );
    payload.envelope.guards.push(Guard {
        name: "parked".into(),
        declared_in: DeclaredIn::Profile("guards.toml".into()),
        cover: Cover {
            target: Target::List("scooter:hardware".into()),
            values: vec![rulecore::value_pattern::ValuePattern::literal(
                "handlebar:lock",
            )],
        },
        when: Program {
            ops: vec![Op::State(0), Op::Const(0), Op::Eq],
        },
        reads: vec![0],
        when_text: "state(\"engine-ecu\", \"speed\") == \"0\"".into(),
        say: Some("moving".into()),
    });
    payload
}

#[test]
fn only_a_covered_action_carries_a_check() {
    let payload = payload();
    let lock = Action::redis("scooter:hardware", "handlebar:lock");
    let check = GuardCheck::of(&payload, &lock).unwrap();
    assert_eq!(
        (check.guards.as_slice(), check.pairs.as_slice()),
        (&[0][..], &[0][..])
    );
    assert_eq!(
        check.fields(&payload).collect::<Vec<_>>(),
        [("engine-ecu", "speed")]
    );
    let unlock = Action::redis("scooter:hardware", "handlebar:unlock");
    assert!(GuardCheck::of(&payload, &unlock).is_none());
}

#[test]
fn the_judgement_fails_closed() {
    let payload = payload();
    let lock = Action::redis("scooter:hardware", "handlebar:lock");
    let check = GuardCheck::of(&payload, &lock).unwrap();
    assert_eq!(judge(&payload, &check, &[Read::Value("0".into())]), Ok(()));
    let refused = judge(&payload, &check, &[Read::Value("12".into())]).unwrap_err();
    assert_eq!(refused.guard, "parked");
    assert_eq!(refused.state_text(), "engine-ecu speed = \"12\"");
    assert_eq!(refused.say.as_deref(), Some("moving"));
    for read in [Read::Absent, Read::Unreadable] {
        assert!(judge(&payload, &check, std::slice::from_ref(&read)).is_err());
    }
    // No value at all for the field: refused too.
    assert!(judge(&payload, &check, &[]).is_err());
}

#[test]
fn the_toast_is_a_warning_from_rules_named_by_the_guard() {
    let Some(Action::Publish {
        channel, message, ..
    }) = toast("parked", "moving")
    else {
        panic!("no toast");
    };
    assert_eq!(channel, NOTIFY_CHANNEL);
    let Text::Plain(json) = message else {
        panic!("computed toast");
    };
    assert!(json.contains(r#""source":"rules","id":"parked""#), "{json}");
    assert!(json.contains(r#""severity":"warning""#), "{json}");
}

/// A pair only a guard reads is not watched for it; once a rule's `when`
/// reads it too, it is.
#[test]
fn a_pair_only_guards_read_is_not_watched() {
    use rulecore::bytecode::{Op, Program};
    let payload = payload();
    assert_eq!(guard_only_pairs(&payload), [true]);
    let engine = Engine::new(
        std::sync::Arc::new(payload.clone()),
        crate::EngineConfig::default(),
    );
    assert!(engine.live_pairs().is_empty());
    assert!(engine.watched_hashes().is_empty());

    let mut read_by_a_rule = payload;
    read_by_a_rule.rules[0].when = Some(Box::new(Program {
        ops: vec![Op::State(0), Op::Const(0), Op::Eq],
    }));
    assert_eq!(guard_only_pairs(&read_by_a_rule), [false]);
    let engine = Engine::new(
        std::sync::Arc::new(read_by_a_rule),
        crate::EngineConfig::default(),
    );
    assert_eq!(engine.live_pairs(), [0]);
    assert_eq!(engine.watched_hashes(), ["engine-ecu"]);

    let mut none = Payload::new("test", Vec::new(), Vec::new(), Vec::new());
    none.envelope.guards.clear();
    assert!(guard_only_pairs(&none).is_empty());
}
