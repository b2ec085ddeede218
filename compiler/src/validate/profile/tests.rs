use crate::diagnostic::{Code, Diagnostic, Severity};
use crate::load::SourceFile;
use crate::profile::catalogue::{Catalogue, DataType, HashInfo, TopicShape};
use crate::validate::{validate_cached, FileChecks, Validated};

fn validate_against(
    files: &[SourceFile],
    deny_warnings: bool,
    catalogue: Option<&Catalogue>,
) -> Validated {
    validate_cached(files, deny_warnings, catalogue, &mut FileChecks::default())
}

fn validate_with(files: &[SourceFile], deny_warnings: bool) -> Validated {
    validate_against(files, deny_warnings, None)
}

fn validate(files: &[SourceFile]) -> Validated {
    validate_with(files, false)
}
use rulecore::value_pattern::ValuePattern;
use std::collections::BTreeMap;

fn patterns(values: &[&str]) -> Vec<ValuePattern> {
    values
        .iter()
        .map(|v| ValuePattern::parse(v).unwrap_or_else(|e| panic!("{v}: {e}")))
        .collect()
}

const VEHICLE_STATES: &[&str] = &[
    "stand-by",
    "parked",
    "hop-on",
    "ready-to-drive",
    "waiting-seatbox",
    "shutting-down",
    "updating",
    "waiting-hibernation",
];
const ALARM_STATUSES: &[&str] = &[
    "disabled",
    "disarmed",
    "delay-armed",
    "armed",
    "level-1-triggered",
    "level-2-triggered",
    "seatbox-access",
    "unknown",
];

fn topic(name: &str, from: Option<&[&str]>, to: Option<&[&str]>) -> TopicShape {
    TopicShape {
        name: name.to_string(),
        from: from.map(patterns),
        from_open: false,
        to: to.map(patterns),
        data: BTreeMap::new(),
    }
}

/// A small Librescoot-like catalogue.
fn librescoot() -> Catalogue {
    let mut hashes = BTreeMap::new();
    hashes.insert(
        "vehicle".to_string(),
        HashInfo {
            fields: [
                ("state", patterns(VEHICLE_STATES)),
                ("kickstand", patterns(&["up", "down"])),
                (
                    "blinker:switch",
                    patterns(&["left", "right", "both", "off"]),
                ),
                ("update:status", Vec::new()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            silent: Vec::new(),
            polled: Vec::new(),
        },
    );
    hashes.insert(
        "alarm".to_string(),
        HashInfo {
            fields: [("status".to_string(), patterns(ALARM_STATUSES))]
                .into_iter()
                .collect(),
            ..HashInfo::default()
        },
    );
    hashes.insert(
        "engine-ecu".to_string(),
        HashInfo {
            fields: [
                ("speed".to_string(), patterns(&["<int>"])),
                ("odometer".to_string(), patterns(&["<int>"])),
            ]
            .into_iter()
            .collect(),
            silent: vec!["speed".into(), "odometer".into()],
            polled: vec!["odometer".into()],
        },
    );
    let mut triggered = topic(
        "alarm.triggered",
        Some(ALARM_STATUSES),
        Some(&["level-1-triggered", "level-2-triggered"]),
    );
    triggered
        .data
        .insert("level".to_string(), Some(DataType::Int));
    let mut charge = topic("battery.charge.changed", Some(&[]), Some(&["<int>"]));
    charge.data.insert("slot".to_string(), Some(DataType::Int));
    let mut topics = vec![
        topic(
            "alarm.status.changed",
            Some(ALARM_STATUSES),
            Some(ALARM_STATUSES),
        ),
        triggered,
        charge,
        topic("button.seatbox.press", None, None),
        topic(
            "vehicle.state.changed",
            Some(VEHICLE_STATES),
            Some(VEHICLE_STATES),
        ),
        topic("vehicle.kickstand.down", Some(&["up"]), Some(&["down"])),
    ];
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Catalogue {
        hashes,
        topics,
        lists: [
            (
                "scooter:blinker",
                patterns(&["left", "right", "both", "off"]),
            ),
            (
                "scooter:alarm",
                patterns(&["enable", "disable", "arm", "disarm", "start:<int>", "stop"]),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        ..Catalogue::default()
    }
}

fn file(text: &str) -> SourceFile {
    SourceFile {
        name: "r.toml".into(),
        text: text.into(),
    }
}

fn rule(on: &str, when: &str, push: &str) -> String {
    format!(
        "[[rule]]\nname = \"r\"\non = [{on}]\nwhen = '{when}'\n\n[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"{push}\"\n"
    )
}

fn check(text: &str) -> Validated {
    validate_against(&[file(text)], false, Some(&librescoot()))
}

/// The one diagnostic, and the text its span covers.
fn only<'t>(validated: &'t Validated, text: &'t str) -> (&'t Diagnostic, &'t str) {
    assert_eq!(
        validated.diagnostics.len(),
        1,
        "{:#?}",
        validated.diagnostics
    );
    let d = &validated.diagnostics[0];
    let span = d.label.as_ref().map_or(0..0, |label| label.span.clone());
    (d, &text[span])
}

#[test]
fn a_to_value_no_matched_topic_carries_is_an_error() {
    let text = rule(
        r#""alarm.triggered""#,
        r#"to == "level2-triggered""#,
        "both",
    );
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::EventValue, Severity::Error));
    assert_eq!(at, r#""level2-triggered""#);
    assert_eq!(
        d.message,
        "`to` is never `\"level2-triggered\"` in `alarm.triggered` events, so this comparison can never be true"
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `level-2-triggered`?"));
    assert_eq!(d.rule.as_deref(), Some("r"));
    assert!(out.rules.is_empty(), "the rule is rejected");
    // Without the profile nothing is said.
    let plain = validate(&[file(&text)]);
    assert!(plain.diagnostics.is_empty(), "{:#?}", plain.diagnostics);
    assert_eq!(plain.rules.len(), 1);
}

#[test]
fn every_form_of_comparison_is_held_against_the_values() {
    for (when, outcome, at) in [
        (r#""lvl" == to"#, "can never be true", r#""lvl""#),
        (r#"to != "lvl""#, "is always true", r#""lvl""#),
        (
            r#"contains(("level-1-triggered", "lvl"), to)"#,
            "of `contains` never matches",
            r#""lvl""#,
        ),
        (r#"from == "armd""#, "can never be true", r#""armd""#),
    ] {
        let text = rule(r#""alarm.triggered""#, when, "both");
        let out = check(&text);
        let (d, span) = only(&out, &text);
        assert_eq!(d.code, Code::EventValue, "{when}");
        assert!(d.message.ends_with(outcome), "{when}: {}", d.message);
        assert_eq!(span, at, "{when}");
    }
}

#[test]
fn a_value_one_matched_topic_may_carry_is_fine() {
    for (on, when) in [
        // `alarm.status.changed` may go to `armed`.
        (r#""alarm.*""#, r#"to == "armed""#),
        (r#""alarm.triggered""#, r#"to == "level-1-triggered""#),
        (r#""alarm.triggered""#, r#"from == """#),
        // Placeholders and "any value".
        (r#""battery.charge.changed""#, r#"to == "42""#),
        (r#""battery.charge.changed""#, r#"from == "anything""#),
        // Not compared with a literal.
        (r#""alarm.triggered""#, r#"str::to_lowercase(to) == "x""#),
        (r#""alarm.triggered""#, r#"data.level == 2"#),
    ] {
        let text = rule(on, when, "both");
        let out = check(&text);
        assert!(out.diagnostics.is_empty(), "{when}: {:#?}", out.diagnostics);
        assert_eq!(out.rules.len(), 1);
    }
}

#[test]
fn a_topic_without_a_known_value_set_is_not_checked() {
    // `custom.thing` is the directory's own: its `to` is unknown.
    let text = format!(
        "[[topic]]\nname = \"custom.thing\"\n\n{}",
        rule(
            r#""alarm.triggered", "custom.thing""#,
            r#"to == "x""#,
            "both"
        )
    );
    let out = check(&text);
    assert!(out.diagnostics.is_empty(), "{:#?}", out.diagnostics);
    // A `[[topic]]` of a derived topic's name wins over the profile.
    let text = format!(
        "[[topic]]\nname = \"alarm.triggered\"\n\n{}",
        rule(r#""alarm.triggered""#, r#"to == "x""#, "both")
    );
    let out = check(&text);
    assert!(out.diagnostics.is_empty(), "{:#?}", out.diagnostics);
    // A pattern that matches no known topic: the values are unknown.
    let text = rule(r#""alarm.triggered", "other.*""#, r#"to == "x""#, "both");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::UnknownTopic);
}

#[test]
fn a_channel_topic_carries_no_to() {
    let text = rule(r#""button.seatbox.press""#, r#"to == "x""#, "both");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::EventValue);
    assert_eq!(
        d.help.as_deref(),
        Some("`button.seatbox.press` events carry no `to`")
    );
}

#[test]
fn a_step_when_is_checked_too_and_names_its_step() {
    let text = "[[rule]]\nname = \"r\"\non = [\"vehicle.kickstand.down\"]\n\n[[rule.step]]\nwhen = 'to == \"dwn\"'\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"off\"\n";
    let out = check(text);
    let (d, at) = only(&out, text);
    assert_eq!((d.code, d.step), (Code::EventValue, Some(0)));
    assert_eq!(at, "\"dwn\"");
    assert_eq!(d.help.as_deref(), Some("did you mean `down`?"));
}

#[test]
fn derived_topics_are_a_catalogue() {
    let text = rule(r#""vehicle.sate.chnged""#, "true", "both");
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!(
        (d.code, d.severity),
        (Code::UnknownTopic, Severity::Warning)
    );
    assert_eq!(at, r#""vehicle.sate.chnged""#);
    assert_eq!(
        d.message,
        "`on` pattern `vehicle.sate.chnged` matches no known topic"
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `vehicle.state.changed`?")),
        "{:?}",
        d.help
    );
    assert_eq!(out.rules.len(), 1, "a warning rejects nothing");
    let denied = validate_against(&[file(&text)], true, Some(&librescoot()));
    assert!(denied.rules.is_empty());
    // `data.*` is typed by the profile's shapes.
    let text = rule(r#""alarm.triggered""#, "data.levl == 2", "both");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::UnknownDataKey);
    assert_eq!(d.help.as_deref(), Some("did you mean `data.level`?"));
    let text = rule(r#""alarm.triggered""#, r#"data.level == "2""#, "both");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::DataType);
}

#[test]
fn state_of_a_known_hash_is_checked() {
    let text = rule(
        r#""vehicle.kickstand.down""#,
        r#"state("vehicle", "state") == "parkd""#,
        "both",
    );
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::StateValue, Severity::Error));
    assert_eq!(at, r#""parkd""#);
    assert_eq!(d.help.as_deref(), Some("did you mean `parked`?"));
    assert!(out.rules.is_empty());

    let text = rule(
        r#""vehicle.kickstand.down""#,
        r#"state("vehicle", "stat") == "parked""#,
        "both",
    );
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!(
        (d.code, d.severity),
        (Code::UnknownStateField, Severity::Warning)
    );
    assert_eq!(at, r#""stat""#);
    assert_eq!(d.help.as_deref(), Some("did you mean `state`?"));
    assert_eq!(out.rules.len(), 1);

    let text = rule(
        r#""vehicle.kickstand.down""#,
        r#"int(state("engine-ecu", "speed")) > 5"#,
        "both",
    );
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::SilentState, Severity::Warning));
    assert_eq!(at, r#"state("engine-ecu", "speed")"#);
    assert!(d.message.contains("would hold the value read at start"));
}

#[test]
fn state_reads_the_profile_does_not_rule_out_are_fine() {
    for when in [
        r#"state("vehicle", "state") == "parked""#,
        r#"contains(("parked", "stand-by"), state("vehicle", "state"))"#,
        // Absent reads as "".
        r#"state("vehicle", "state") != """#,
        // Any value.
        r#"state("vehicle", "update:status") == "whatever""#,
        // Polled, though silent.
        r#"int(state("engine-ecu", "odometer")) > 5"#,
        // A hash the profile does not know (an accessory).
        r#"state("heater", "mode") == "x""#,
    ] {
        let text = rule(r#""vehicle.kickstand.down""#, when, "both");
        let out = check(&text);
        assert!(out.diagnostics.is_empty(), "{when}: {:#?}", out.diagnostics);
    }
    let text = rule(
        r#""vehicle.kickstand.down""#,
        r#"contains(("parked", "hop-onn"), state("vehicle", "state"))"#,
        "both",
    );
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!((d.code, at), (Code::StateValue, r#""hop-onn""#));
    assert_eq!(d.help.as_deref(), Some("did you mean `hop-on`?"));
}

#[test]
fn a_push_the_list_does_not_accept_is_an_error() {
    let text = rule(r#""alarm.triggered""#, "true", "bothh");
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::ListValue, Severity::Error));
    assert_eq!(at, r#""bothh""#);
    assert_eq!(d.step, Some(0));
    assert_eq!(d.help.as_deref(), Some("did you mean `both`?"));
    assert!(out.rules.is_empty());

    let alarm = |push: &str| {
        format!("[[rule]]\nname = \"r\"\non = [\"alarm.triggered\"]\n\n[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:alarm\"\npush = \"{push}\"\n")
    };
    for fine in ["start:30", "stop", "start:${data.level}"] {
        let text = alarm(fine);
        let out = check(&text);
        assert!(out.diagnostics.is_empty(), "{fine}: {:#?}", out.diagnostics);
    }
    let text = alarm("start:30s");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::ListValue);
    assert_eq!(
        d.help.as_deref(),
        Some("`scooter:alarm` accepts `enable`, `disable`, `arm`, `disarm`, `start:<int>`, `stop`")
    );
    // A list the profile does not know.
    let text = rule(r#""alarm.triggered""#, "true", "bothh").replace("scooter:blinker", "x:y");
    assert!(check(&text).diagnostics.is_empty());
}

#[test]
fn without_a_catalogue_nothing_changes() {
    let text = format!(
        "{}\n{}",
        rule(
            r#""vehicle.sate.changed""#,
            r#"state("vehicle", "state") == "parkd" && to == "x""#,
            "bothh"
        ),
        "[[topic]]\nname = \"other\"\n"
    );
    let with_none = validate_against(&[file(&text)], false, None);
    let plain = validate_with(&[file(&text)], false);
    let show = |v: &Validated| format!("{:?} {}", v.diagnostics, v.rules.len());
    assert_eq!(show(&with_none), show(&plain));
    assert!(plain
        .diagnostics
        .iter()
        .all(|d| d.code == Code::UnknownTopic));
}

#[test]
fn a_disabled_rule_with_a_profile_error_is_left_out_with_a_warning() {
    let text = rule(r#""alarm.triggered""#, "true", "bothh")
        .replace("name = \"r\"", "name = \"r\"\nenabled = false");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::ListValue, Severity::Warning));
    assert!(out.rules.is_empty());
}

/// The edited text a diagnostic's fix makes of `text`.
fn fixed(d: &Diagnostic, text: &str) -> String {
    let fix = d.fix.as_ref().unwrap_or_else(|| panic!("no fix: {d:#?}"));
    let mut out = text.to_string();
    out.replace_range(fix.span.clone(), &fix.replacement);
    out
}

/// `state("vehicel", "state")` reads a hash no service writes,
/// one letter from the profile's `vehicle`: a warning with the fix.
#[test]
fn a_state_hash_close_to_a_profile_hash_gets_did_you_mean() {
    let text = rule(
        r#""vehicle.kickstand.down""#,
        r#"state("vehicel", "state") == "parked""#,
        "both",
    );
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!(
        (d.code, d.severity),
        (Code::UnknownStateHash, Severity::Warning)
    );
    assert_eq!(at, r#""vehicel""#);
    assert_eq!(d.help.as_deref(), Some("did you mean `vehicle`?"));
    assert!(fixed(d, &text).contains(r#"state("vehicle", "state")"#));
    assert_eq!(out.rules.len(), 1, "a warning rejects nothing");
    // In a computed value too.
    let text = rule(
        r#""vehicle.kickstand.down""#,
        "true",
        r#"${state(\"alrm\", \"status\")}"#,
    )
    .replace("scooter:blinker", "x:y");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::UnknownStateHash);
    assert_eq!(d.help.as_deref(), Some("did you mean `alarm`?"));
}

/// `list = "scooter:blinkers"` is a list no service reads.
#[test]
fn a_list_close_to_a_profile_list_gets_did_you_mean() {
    let text =
        rule(r#""alarm.triggered""#, "true", "both").replace("scooter:blinker", "scooter:blinkers");
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::UnknownList, Severity::Warning));
    assert_eq!(at, r#""scooter:blinkers""#);
    assert_eq!(d.step, Some(0));
    assert_eq!(d.help.as_deref(), Some("did you mean `scooter:blinker`?"));
    assert!(fixed(d, &text).contains("list = \"scooter:blinker\"\n"));
    assert_eq!(out.rules.len(), 1);
    // Also with a computed `push`.
    let text = text.replace("push = \"both\"", "push = \"${to}\"");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::UnknownList);
}

/// an `on` or `cancel-on` pattern one edit from a known topic
/// is an error; declaring the topic silences it.
#[test]
fn a_pattern_one_edit_from_a_known_topic_is_an_error() {
    for (on, cancel_on, at, near) in [
        (
            r#""alarm.trigered""#,
            "",
            r#""alarm.trigered""#,
            "alarm.triggered",
        ),
        (r#""alrm.*""#, "", r#""alrm.*""#, "alarm.*"),
        (
            r#""alarm.triggered""#,
            r#"cancel-on = ["alarm.status.chnged"]"#,
            r#""alarm.status.chnged""#,
            "alarm.status.changed",
        ),
    ] {
        let text = rule(on, "true", "both")
            .replace("when = 'true'", &format!("when = 'true'\n{cancel_on}"));
        let out = check(&text);
        let (d, span) = only(&out, &text);
        assert_eq!(
            (d.code, d.severity),
            (Code::NearMissTopic, Severity::Error),
            "{on}"
        );
        assert_eq!(span, at);
        let help = d.help.as_deref().unwrap_or_default();
        assert!(
            help.starts_with(&format!("did you mean `{near}`?")),
            "{help}"
        );
        assert!(help.contains("[[topic]]"), "says how to silence it: {help}");
        assert_eq!(
            &fixed(d, &text)[d.fix.as_ref().unwrap().span.start..][..near.len() + 2],
            format!("\"{near}\"")
        );
        assert!(out.rules.is_empty(), "{on}: the rule is rejected");
    }
    // Declared, it is meant: silent, outside the profile's families.
    let text = format!(
        "[[topic]]\nname = \"alrm.triggered\"\n\n{}",
        rule(r#""alrm.triggered""#, "true", "both")
    );
    let out = check(&text);
    assert!(out.diagnostics.is_empty(), "{:#?}", out.diagnostics);
    // Declared inside an owned family, it is no near miss any more, but
    // `ruled --bus own` would never deliver it: that is said instead.
    let text = format!(
        "[[topic]]\nname = \"alarm.trigered\"\n\n{}",
        rule(r#""alarm.trigered""#, "true", "both")
    );
    let out = check(&text);
    let (d, span) = only(&out, &text);
    assert_eq!((d.code, d.severity), (Code::OwnedFamily, Severity::Warning));
    assert!(span.starts_with("[[topic]]"), "{span}");
    let help = d.help.as_deref().unwrap_or_default();
    assert!(
        help.contains("never runs") && help.contains("`accessory.trigered`"),
        "{help}"
    );
    // Two edits away: still the warning of an unknown topic.
    let text = rule(r#""alarm.trigerd""#, "true", "both");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(
        (d.code, d.severity),
        (Code::UnknownTopic, Severity::Warning)
    );
}

/// `from` is whatever the field held before, also a value the
/// profile does not list (`n/a`): never an error when an emit has no
/// `from` condition; a value close to a listed one is still a near miss,
/// a warning.
#[test]
fn an_unlisted_from_is_possible_and_a_close_one_is_a_warning() {
    let mut catalogue = librescoot();
    for shape in &mut catalogue.topics {
        shape.from_open = shape.name == "alarm.triggered";
    }
    let check = |text: &str| validate_against(&[file(text)], false, Some(&catalogue));
    for when in [r#"from == "n/a""#, r#"from != "unknown""#] {
        let text = rule(r#""alarm.triggered""#, when, "both");
        let out = check(&text);
        assert!(out.diagnostics.is_empty(), "{when}: {:#?}", out.diagnostics);
    }
    let text = rule(r#""alarm.triggered""#, r#"from == "armd""#, "both");
    let out = check(&text);
    let (d, at) = only(&out, &text);
    assert_eq!(
        (d.code, d.severity),
        (Code::UnlistedFrom, Severity::Warning)
    );
    assert_eq!(at, r#""armd""#);
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `armed`?")),
        "{:?}",
        d.help
    );
    assert!(fixed(d, &text).contains(r#"from == "armed""#));
    assert_eq!(out.rules.len(), 1, "a warning rejects nothing");
    // A closed `from` (every emit has a `from` condition) is as before.
    let text = rule(r#""vehicle.kickstand.down""#, r#"from == "n/a""#, "both");
    let out = check(&text);
    let (d, _) = only(&out, &text);
    assert_eq!(d.code, Code::EventValue);
}
