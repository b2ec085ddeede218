//! The checks of rules against a bus profile
//! (docs/rules.md#checks-against-the-profile) on the cases of
//! fixtures/invalid that carry a `# profile: librescoot` line, checked
//! in-process against a hand-built, Librescoot-like catalogue.
//!
//! The snapshots have the layout of tests/check_fixtures.rs's. Once
//! `rulec check` loads the built-in profile by default, these cases belong
//! to its `every_invalid_case` (remove the `needs_profile` skip there),
//! checked against the real profile, and this file can go.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::diagnostic::{render_text, to_json, Severity, TextStyle};
use rulec::profile::catalogue::{Catalogue, DataType, HashInfo, TopicShape};
use rulecore::value_pattern::ValuePattern;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn patterns(values: &[&str]) -> Vec<ValuePattern> {
    values
        .iter()
        .map(|v| ValuePattern::parse(v).unwrap())
        .collect()
}

const VEHICLE_STATES: &[&str] = &[
    "stand-by",
    "parked",
    "hop-on",
    "hop-on-learning",
    "ready-to-drive",
    "waiting-seatbox",
    "shutting-down",
    "updating",
    "waiting-hibernation",
    "waiting-hibernation-advanced",
    "waiting-hibernation-seatbox",
    "waiting-hibernation-confirm",
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

fn topic(name: &str, from: &[&str], to: &[&str]) -> TopicShape {
    TopicShape {
        name: name.to_string(),
        from: Some(patterns(from)),
        to: Some(patterns(to)),
        data: BTreeMap::new(),
    }
}

/// A part of the Librescoot bus (DESIGN 14.2, 14.5).
fn librescoot() -> Catalogue {
    let vehicle = HashInfo {
        fields: [
            ("state", patterns(VEHICLE_STATES)),
            ("kickstand", patterns(&["up", "down"])),
            (
                "blinker:switch",
                patterns(&["left", "right", "both", "off"]),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        ..HashInfo::default()
    };
    let alarm = HashInfo {
        fields: [("status".to_string(), patterns(ALARM_STATUSES))]
            .into_iter()
            .collect(),
        ..HashInfo::default()
    };
    let engine = HashInfo {
        fields: [("speed".to_string(), patterns(&["<int>"]))]
            .into_iter()
            .collect(),
        silent: vec!["speed".into()],
        polled: Vec::new(),
    };
    let mut triggered = topic(
        "alarm.triggered",
        ALARM_STATUSES,
        &["level-1-triggered", "level-2-triggered"],
    );
    triggered
        .data
        .insert("level".to_string(), Some(DataType::Int));
    let mut topics = vec![
        topic("alarm.status.changed", ALARM_STATUSES, ALARM_STATUSES),
        triggered,
        topic("vehicle.kickstand.down", &["up"], &["down"]),
        topic("vehicle.kickstand.up", &["down"], &["up"]),
        topic("vehicle.state.changed", VEHICLE_STATES, VEHICLE_STATES),
        topic("vehicle.locked", VEHICLE_STATES, &["stand-by"]),
        topic("vehicle.unlocked", &["stand-by"], &["parked"]),
    ];
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Catalogue {
        hashes: [
            ("vehicle".to_string(), vehicle),
            ("alarm".to_string(), alarm),
            ("engine-ecu".to_string(), engine),
        ]
        .into_iter()
        .collect(),
        topics,
        lists: [
            (
                "scooter:blinker",
                patterns(&["left", "right", "both", "off"]),
            ),
            (
                "scooter:state",
                patterns(&["unlock", "lock", "lock-hibernate", "force-lock"]),
            ),
            (
                "scooter:alarm",
                patterns(&["enable", "disable", "arm", "disarm", "start:<int>", "stop"]),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    }
}

fn profile_cases() -> Vec<PathBuf> {
    let invalid = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/invalid");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(invalid)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            // Some cases are not UTF-8 (`rulec::encoding`), or directories.
            path.is_file()
                && String::from_utf8_lossy(&std::fs::read(path).unwrap())
                    .lines()
                    .any(|line| line.starts_with("# profile:"))
        })
        .collect();
    cases.sort();
    cases
}

#[test]
fn every_profile_case() {
    let cases = profile_cases();
    assert!(cases.len() >= 4, "{cases:?}");
    let catalogue = librescoot();
    for path in cases {
        let case = path.file_stem().unwrap().to_str().unwrap().to_string();
        let temp = tempfile::tempdir().unwrap();
        std::fs::copy(&path, temp.path().join(path.file_name().unwrap())).unwrap();
        let report =
            rulec::check::check_dir_with_catalogue(temp.path(), false, Some(&catalogue)).unwrap();
        let code = i32::from(report.failed(false));
        let text = render_text(&report.diagnostics, &report.files, TextStyle::Plain);
        let json: String = report
            .diagnostics
            .iter()
            .map(|d| format!("{}\n", to_json(d, &report.files)))
            .collect();
        let snapshot = format!(
            "exit: {code}\n--- stderr ---\n{text}{}\n--- stdout (--format json) ---\n{json}",
            report.summary()
        );
        insta::assert_snapshot!(format!("profile__{case}"), snapshot);

        let source = std::fs::read_to_string(&path).unwrap();
        for expected in source
            .lines()
            .filter_map(|line| line.strip_prefix("# expect:"))
            .flat_map(|codes| codes.split(','))
        {
            assert!(
                report.diagnostics.iter().any(|d| d.code == expected.trim()),
                "{case}: expected {expected}, got {:?}",
                report.diagnostics
            );
        }
        let errors = report
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error);
        assert_eq!(errors, !case.starts_with("warn-"), "{case}");
        // Without the profile the same rules are clean (the topics are
        // not declared, so not even `unknown-topic`).
        let plain = rulec::check::check_dir_with_catalogue(temp.path(), false, None).unwrap();
        assert!(
            plain.diagnostics.is_empty(),
            "{case}: {:?}",
            plain.diagnostics
        );
    }
}
