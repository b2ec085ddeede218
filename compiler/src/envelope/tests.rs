use crate::build::assemble_all;
use crate::check::CheckReport;
use crate::diagnostic::Code;
use crate::load::{Loaded, SourceFile};
use rulecore::envelope::{Breaker, DeclaredIn, Target, Trip};

const RULE: &str = r#"
[[rule]]
name = "lock"
on = ["button.brake.left.hold"]
[[rule.step]]
do = "redis"
list = "scooter:hardware"
push = "handlebar:lock"
"#;

fn check(files: &[(&str, &str)]) -> CheckReport {
    let loaded = Loaded {
        files: files
            .iter()
            .map(|(name, text)| SourceFile {
                name: name.to_string(),
                text: text.to_string(),
            })
            .collect(),
        ..Loaded::default()
    };
    crate::session::Session::new(None).check_loaded(loaded)
}

fn codes(report: &CheckReport) -> Vec<Code> {
    report.diagnostics.iter().map(|d| d.code).collect()
}

#[test]
fn a_rule_file_guard_is_read_lowered_and_in_the_bundle() {
    let text = format!(
        "{RULE}\n[[guard]]\nname = \"parked\"\nlist = \"scooter:hardware\"\nvalues = [\"handlebar:<text>\"]\nwhen = 'int(state(\"engine-ecu\", \"speed\")) == 0'\nsay = \"moving\"\n\n[[limit]]\nname = \"bars\"\nlist = \"scooter:hardware\"\nmax = 2\nper = \"10s\"\n"
    );
    let report = check(&[("a.toml", &text)]);
    // A brake-lever gesture shows nothing of the speed: the guard may
    // refuse the step (docs/safety-checks.md#guards).
    assert_eq!(codes(&report), [Code::Guarded], "{:?}", report.diagnostics);
    let payload = assemble_all(&report.rules, None, &report.envelope, "test");
    let guard = &payload.envelope.guards[0];
    assert_eq!(guard.name, "parked");
    assert_eq!(guard.declared_in, DeclaredIn::Rules("a.toml".into()));
    assert_eq!(guard.cover.target, Target::List("scooter:hardware".into()));
    assert_eq!(guard.say.as_deref(), Some("moving"));
    let pair = &payload.state_pairs[guard.reads[0] as usize];
    assert_eq!(
        (pair.hash.as_str(), pair.field.as_str()),
        ("engine-ecu", "speed")
    );
    assert_eq!(payload.envelope.limits[0].per_ns, 10_000_000_000);
    rulecore::verify::verify_payload(&payload).unwrap();
}

#[test]
fn a_guard_reading_the_event_is_an_error_at_the_read() {
    let text = format!(
        "{RULE}\n[[guard]]\nname = \"g\"\nexec = true\nwhen = 'data.level == 1 && to == \"x\"'\n"
    );
    let report = check(&[("a.toml", &text)]);
    let reads: Vec<_> = report
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::GuardReadsEvent)
        .collect();
    assert_eq!(reads.len(), 2, "{:?}", report.diagnostics);
    let span = reads[0].label.as_ref().unwrap().span.clone();
    assert_eq!(&text[span], "data.level");
    assert!(report.envelope.guards.is_empty());
}

#[test]
fn two_guards_with_one_name_are_an_error_across_files() {
    let guard = "[[guard]]\nname = \"g\"\nexec = true\nwhen = 'state(\"vehicle\", \"state\") == \"parked\"'\n";
    let report = check(&[("a.toml", guard), ("b.toml", guard)]);
    assert_eq!(codes(&report), [Code::DuplicateGuard]);
    let diagnostic = &report.diagnostics[0];
    assert_eq!(diagnostic.file.as_deref(), Some("b.toml"));
}

#[test]
fn a_cover_names_exactly_one_kind_of_action() {
    let none = "[[guard]]\nname = \"g\"\nwhen = 'true'\n";
    assert_eq!(codes(&check(&[("a.toml", none)])), [Code::Guard]);
    let two = "[[limit]]\nname = \"l\"\nexec = true\nlist = \"x\"\nmax = 1\nper = \"1s\"\n";
    assert_eq!(codes(&check(&[("a.toml", two)])), [Code::Guard]);
    let values = "[[limit]]\nname = \"l\"\ncan = 0x4A0\nvalues = [\"a\"]\nmax = 1\nper = \"1s\"\n";
    assert_eq!(codes(&check(&[("a.toml", values)])), [Code::Guard]);
    let unknown = "[[guard]]\nname = \"g\"\nexec = true\nwhen = 'true'\nsays = \"x\"\n";
    assert_eq!(codes(&check(&[("a.toml", unknown)])), [Code::UnknownKey]);
}

#[test]
fn trip_is_a_table_or_false() {
    let with = |trip: &str| RULE.replace("on = [", &format!("trip = {trip}\non = ["));
    let off = check(&[("a.toml", &with("false"))]);
    assert_eq!(off.rules[0].trip, Breaker::Off);
    let set = check(&[("a.toml", &with("{ starts = 5, pause = \"1s\" }"))]);
    assert_eq!(
        set.rules[0].trip,
        Breaker::Set(Trip {
            starts: 5,
            pause_ns: 1_000_000_000,
            ..Trip::DEFAULT
        })
    );
    assert_eq!(check(&[("a.toml", RULE)]).rules[0].trip, Breaker::Default);
    assert_eq!(codes(&check(&[("a.toml", &with("true"))])), [Code::Trip]);
    assert_eq!(
        codes(&check(&[("a.toml", &with("{ starts = 0 }"))])),
        [Code::Type]
    );
}
