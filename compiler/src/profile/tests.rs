use super::read::{builtin_files, ProfileFiles};
use super::*;
use crate::diagnostic::Code;
use rulecore::profile::{Changes, DataSpec, Origin};
use rulecore::value_pattern::ValuePattern;

fn builtin() -> LoadedProfile {
    from_files(builtin_files())
}

/// A profile of one `profile.toml` (named `p`) and `text` as `t.toml`.
fn with(text: &str) -> LoadedProfile {
    from_files(ProfileFiles {
        files: vec![
            SourceFile {
                name: "p/profile.toml".into(),
                text: "name = \"p\"\n".into(),
            },
            SourceFile {
                name: "p/t.toml".into(),
                text: text.into(),
            },
        ],
        bare: vec!["profile.toml".into(), "t.toml".into()],
        own_from: 0,
        diagnostics: Vec::new(),
        dir_label: Some("p".into()),
    })
}

fn codes(profile: &LoadedProfile) -> Vec<&'static str> {
    profile
        .diagnostics
        .iter()
        .map(|d| d.code.as_str())
        .collect()
}

const HASH: &str =
    "[[hash]]\nname = \"h\"\n[hash.fields]\ns = [\"on\", \"off\"]\nn = [\"<int>\"]\nu = []\n";

/// docs/librescoot.md's table of events: every topic, in the order one change emits them.
const TOPICS: &[&str] = &[
    "vehicle.state.changed",
    "vehicle.unlocked",
    "vehicle.locked",
    "ride.started",
    "ride.ended",
    "vehicle.hibernating",
    "vehicle.seatbox.opened",
    "vehicle.seatbox.closed",
    "vehicle.kickstand.up",
    "vehicle.kickstand.down",
    "vehicle.handlebar.locked",
    "vehicle.handlebar.unlocked",
    "vehicle.blinker.changed",
    "battery.inserted",
    "battery.removed",
    "battery.state.changed",
    "battery.charge.changed",
    "aux.charge.changed",
    "cbb.charge.changed",
    "alarm.status.changed",
    "alarm.armed",
    "alarm.disarmed",
    "alarm.triggered",
    "power.state.changed",
    "power.wake",
    "net.connectivity.changed",
    "ota.status.changed",
    "keycard.auth.passed",
    "keycard.auth.failed",
    "dashboard.ready",
    "motion.detected",
    "sms.received",
];

#[test]
fn the_builtin_profile_loads_clean_with_every_topic() {
    let profile = builtin();
    assert!(profile.diagnostics.is_empty(), "{:#?}", profile.diagnostics);
    assert_eq!(profile.name, "librescoot");
    assert_eq!(profile.digest.len(), 64);
    let mut pool = ConstPool::new();
    let lowered = profile.lower(&mut pool);
    let topics = lowered.topics();
    for topic in TOPICS {
        assert!(topics.contains(topic), "{topic} missing");
        assert!(profile.catalogue.topic(topic).is_some(), "{topic}");
    }
    for source in ["horn", "seatbox", "brake.left", "brake.right"] {
        for gesture in ["press", "release", "tap", "long-tap", "hold", "double-tap"] {
            let topic = format!("button.{source}.{gesture}");
            assert!(topics.contains(&topic.as_str()), "{topic}");
        }
    }
    assert_eq!(topics.len(), TOPICS.len() + 24, "{topics:?}");
    // The vehicle's state emits its six topics in the table's order.
    let state = lowered
        .sources
        .iter()
        .find(|s| matches!(&s.origin, Origin::Field { hash, field, .. } if hash == "vehicle" && field == "state"))
        .unwrap();
    let order: Vec<&str> = state.emits.iter().map(|e| e.topic.as_str()).collect();
    assert_eq!(order, TOPICS[..6]);
    assert!(state.emits[5].when.is_some());
    // Polls: engine-ecu every second, gps every 5 s, internet-usage.
    let poll = |hash: &str| lowered.polls.iter().find(|p| p.hash == hash).unwrap();
    assert_eq!(poll("engine-ecu").every_ns, 1_000_000_000);
    for field in [
        "speed",
        "odometer",
        "kers",
        "regen-available",
        "gear",
        "fault:code",
    ] {
        assert!(
            poll("engine-ecu").fields.iter().any(|f| f == field),
            "{field}"
        );
    }
    assert_eq!(poll("gps").every_ns, 5_000_000_000);
    assert_eq!(poll("gps").fields.len(), 21);
    poll("internet-usage");
    // Keycard taps: every notification, with the fields read at it.
    let keycard = lowered
        .sources
        .iter()
        .find(|s| matches!(&s.origin, Origin::Field { hash, .. } if hash == "keycard"))
        .unwrap();
    assert_eq!(keycard.changes, Changes::Every);
    assert_eq!(
        keycard.emits[0].data,
        vec![
            ("type".to_string(), DataSpec::Field("type".into())),
            ("uid".to_string(), DataSpec::Field("uid".into())),
        ]
    );
}

#[test]
fn the_catalogue_narrows_values_and_types_data() {
    let catalogue = builtin().catalogue;
    let triggered = catalogue.topic("alarm.triggered").unwrap();
    let lit = |values: &[&str]| {
        values
            .iter()
            .map(|v| ValuePattern::literal(v))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        triggered.to,
        Some(lit(&["level-1-triggered", "level-2-triggered"]))
    );
    // The field's listed values, but `from` is whatever the field held
    // before, also a value the profile does not list (`n/a`).
    assert_eq!(triggered.from.as_ref().map(Vec::len), Some(8));
    assert!(triggered.from_open);
    let unlocked = catalogue.topic("vehicle.unlocked").unwrap();
    assert!(!unlocked.from_open, "its emit says `from = \"stand-by\"`");
    assert_eq!(
        triggered.data.get("level"),
        Some(&Some(catalogue::DataType::Int))
    );
    let button = catalogue.topic("button.brake.left.hold").unwrap();
    assert_eq!(button.from, None);
    assert_eq!(button.to, None);
    let motion = catalogue.topic("motion.detected").unwrap();
    assert_eq!(
        motion.data.get("raw"),
        Some(&Some(catalogue::DataType::Str))
    );
    let charge = catalogue.topic("battery.charge.changed").unwrap();
    assert_eq!(charge.to, Some(vec![ValuePattern::parse("<int>").unwrap()]));
    let wake = catalogue.topic("power.wake").unwrap();
    assert_eq!(wake.to, Some(Vec::new()), "any value");
    let ecu = &catalogue.hashes["engine-ecu"];
    assert!(ecu.is_live("speed"));
    assert!(!catalogue.hashes["extensions"].is_live("rules"));
    assert!(catalogue.lists["scooter:power"]
        .iter()
        .any(|p| p.matches("hibernate-for:30")));
    assert!(catalogue.lists["scooter:led:fade"][0].matches("2:15"));
}

#[test]
fn a_source_on_an_undeclared_field_says_which_fields_there_are() {
    let profile = with(&format!(
        "{HASH}[[source]]\nhash = \"h\"\nfield = \"ss\"\n[[source.emit]]\ntopic = \"a.b\"\n"
    ));
    assert_eq!(codes(&profile), ["rulec::profile::source"]);
    assert!(profile.diagnostics[0]
        .help
        .as_deref()
        .unwrap()
        .starts_with("did you mean `s`?"));
    let profile =
        with("[[source]]\nhash = \"nope\"\nfield = \"s\"\n[[source.emit]]\ntopic = \"a.b\"\n");
    assert_eq!(codes(&profile), ["rulec::profile::source"]);
}

#[test]
fn values_outside_the_set_and_bad_patterns() {
    let profile = with(&format!(
        "{HASH}[[source]]\nhash = \"h\"\nfield = \"s\"\n[[source.emit]]\ntopic = \"a.b\"\nto = \"offf\"\n\
         [[source.emit]]\ntopic = \"a.c\"\nfrom = \"<seconds>\"\n"
    ));
    assert_eq!(
        codes(&profile),
        ["rulec::profile::value", "rulec::profile::value-pattern"]
    );
    assert!(profile.diagnostics[0]
        .help
        .as_deref()
        .unwrap()
        .starts_with("did you mean `off`?"));
    assert!(profile.decls.sources.is_empty());
}

#[test]
fn channels_topics_and_names() {
    let profile =
        with("[[source]]\nchannel = \"ev:alarm\"\n[[source.emit]]\ntopic = \"a.*\"\nto = \"x\"\n");
    assert_eq!(
        codes(&profile),
        [
            "rulec::profile::source",
            "rulec::profile::emit",
            "rulec::profile::emit"
        ]
    );
    let profile = with(&format!(
        "{HASH}[[source]]\nhash = \"h\"\nfield = \"s\"\nread = [\"n\"]\n[[source.emit]]\ntopic = \"a.b\"\n\
         when = 'data.n == \"1\" && src == \"x\" && data.payload == \"x\"'\n"
    ));
    assert_eq!(
        codes(&profile),
        ["rulec::when::unknown-name", "rulec::when::unknown-name"],
        "{:#?}",
        profile.diagnostics
    );
}

#[test]
fn polls_and_duplicates() {
    let profile = with(
        "[[hash]]\nname = \"h\"\npoll = \"50ms\"\npolled = [\"a\"]\n[hash.fields]\na = []\n\
         [[hash]]\nname = \"g\"\n[hash.fields]\nb = []\n[[hash]]\nname = \"g\"\n[hash.fields]\nc = []\n\
         [[list]]\nkey = \"l\"\nvalues = []\n[[list]]\nkey = \"l\"\nvalues = [\"x\"]\n",
    );
    assert_eq!(
        codes(&profile),
        [
            "rulec::profile::poll",
            "rulec::profile::duplicate",
            "rulec::profile::duplicate"
        ],
        "{:#?}",
        profile.diagnostics
    );
    let duplicate = &profile.diagnostics[1];
    assert_eq!(duplicate.related.len(), 1);
}

#[test]
fn unknown_keys_suggest_the_right_one() {
    let profile = with(&format!(
        "{HASH}[[source]]\nhash = \"h\"\nfeld = \"s\"\n[[source.emit]]\ntopic = \"a\"\n\
         [[source]]\nhash = \"h\"\nfield = \"s\"\n[[source.emit]]\ntopik = \"a\"\n"
    ));
    let unknown: Vec<_> = profile
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::UnknownKey)
        .map(|d| d.label.as_ref().unwrap().text.clone())
        .collect();
    assert_eq!(
        unknown,
        [
            "unknown key; did you mean `field`?",
            "unknown key; did you mean `topic`?"
        ]
    );
}

#[test]
fn lowering_shares_the_rules_pool() {
    let profile = with(&format!(
        "{HASH}[[source]]\nhash = \"h\"\nfield = \"n\"\n[[source.emit]]\ntopic = \"a.b\"\n\
         when = 'int(to) > 3 && state(\"h\", \"s\") == \"on\"'\ndata = {{ twice = {{ expr = 'int(to) * 2' }}, k = \"c\", f = 1.5, b = true }}\n"
    ));
    assert!(profile.diagnostics.is_empty(), "{:#?}", profile.diagnostics);
    let pairs: Vec<_> = profile.state_pairs().collect();
    assert_eq!(pairs.len(), 1);
    let mut pool = ConstPool::with_state_pairs(pairs);
    let lowered = profile.lower(&mut pool);
    let emit = &lowered.sources[0].emits[0];
    let keys: Vec<&str> = emit.data.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "f", "k", "twice"]);
    assert!(matches!(emit.data[3].1, DataSpec::Expr(_)));
    let (consts, state_pairs) = pool.finish();
    let when = emit.when.as_ref().unwrap();
    rulecore::verify::verify_program(when, &consts, state_pairs.len()).unwrap();
    let DataSpec::Expr(expr) = &emit.data[3].1 else {
        unreachable!()
    };
    rulecore::verify::verify_value_program(expr, &consts, state_pairs.len()).unwrap();
}

#[test]
fn a_directory_without_profile_toml_is_named() {
    let profile = from_files(ProfileFiles {
        files: vec![SourceFile {
            name: "d/a.toml".into(),
            text: String::new(),
        }],
        bare: vec!["a.toml".into()],
        own_from: 0,
        diagnostics: Vec::new(),
        dir_label: Some("d".into()),
    });
    assert_eq!(codes(&profile), ["rulec::profile"]);
    assert_eq!(profile.diagnostics[0].file.as_deref(), Some("d"));
}
