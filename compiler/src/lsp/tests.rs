//! Hover, completion and definitions against the built-in profile, in
//! process (the stdio tests in compiler/tests/lsp.rs drive the binary).

use super::complete::complete;
use super::definition::{definition, Target};
use super::facts::Facts;
use super::hover::hover;
use crate::check::CheckReport;
use crate::load::Loaded;
use crate::profile::{load, LoadedProfile, ProfileChoice};
use crate::session::Session;
use std::sync::Arc;

/// `text` with `|` marking the cursor: the text without it, the offset.
fn cursor(text: &str) -> (String, usize) {
    let offset = text.find('|').unwrap();
    (text.replacen('|', "", 1), offset)
}

fn checked(text: &str) -> (Arc<LoadedProfile>, CheckReport) {
    let profile = Arc::new(load(&ProfileChoice::Builtin).unwrap().unwrap());
    let mut loaded = Loaded::default();
    loaded.overlay("a.toml", text);
    let report = Session::new(Some(Arc::clone(&profile))).check_loaded(loaded);
    (profile, report)
}

fn hover_at(marked: &str) -> String {
    let (text, offset) = cursor(marked);
    let (profile, report) = checked(&text);
    let facts = Facts {
        profile: Some(&profile),
        topics: &report.topics,
        envelope: Some(&report.envelope),
    };
    hover(&text, offset, facts).unwrap_or_default()
}

fn labels_at(marked: &str) -> Vec<String> {
    let (text, offset) = cursor(marked);
    let (profile, report) = checked(&text);
    let facts = Facts {
        profile: Some(&profile),
        topics: &report.topics,
        envelope: Some(&report.envelope),
    };
    complete(&text, offset, facts)
        .into_iter()
        .map(|candidate| candidate.label)
        .collect()
}

const STEP: &str = "[[rule]]\nname = \"r\"\non = [\"vehicle.state.changed\"]\n\n[[rule.step]]\n";

#[test]
fn hover_explains_keys_topics_state_and_lists() {
    let key = hover_at(
        "[[rule]]\nname = \"r\"\non = [\"vehicle.state.changed\"]\ncon|currency = \"drop\"\n",
    );
    assert!(
        key.contains("`\"restart\"`") && key.contains("default"),
        "{key}"
    );
    let topic = hover_at("[[rule]]\nname = \"r\"\non = [\"vehicle.st|ate.changed\"]\n");
    assert!(topic.contains("hash `vehicle` field `state`"), "{topic}");
    assert!(topic.contains("`parked`"), "{topic}");
    let silent = hover_at(&format!(
        "{STEP}do = \"exec\"\ncommand = \"/bin/true\"\nwhen = 'state(\"vehicle\", \"state:time|stamp\") != \"\"'\n"
    ));
    assert!(silent.contains("holds the value read at start"), "{silent}");
    let list = hover_at(&format!(
        "{STEP}do = \"redis\"\nlist = \"scooter:blinker\"\npush = \"bo|th\"\n"
    ));
    assert!(list.contains("`left`") && list.contains("`off`"), "{list}");
}

#[test]
fn completion_at_each_level() {
    let step_keys = labels_at(&format!("{STEP}do = \"redis\"\n|\n"));
    assert!(step_keys.contains(&"list".to_string()), "{step_keys:?}");
    assert!(
        !step_keys.contains(&"command".to_string()),
        "an exec key: {step_keys:?}"
    );
    assert!(
        !step_keys.contains(&"do".to_string()),
        "written already: {step_keys:?}"
    );
    assert!(
        step_keys.contains(&"[[rule.step]]".to_string()),
        "{step_keys:?}"
    );
    let repeat = labels_at("[[rule]]\nname = \"r\"\nrepeat = { |}\n");
    assert_eq!(repeat, ["count", "every", "period"]);
    let durations = labels_at(&format!("{STEP}do = \"redis\"\nafter = \"|\"\n"));
    assert!(durations.contains(&"30s".to_string()), "{durations:?}");
    let kinds = labels_at(&format!("{STEP}do = \"|\"\n"));
    assert_eq!(kinds, ["redis", "publish", "notify", "exec", "can"]);
    let lists = labels_at(&format!("{STEP}do = \"redis\"\nlist = \"|\"\n"));
    assert!(lists.contains(&"scooter:blinker".to_string()), "{lists:?}");
    let fields =
        labels_at("[[rule]]\nname = \"r\"\n[[rule.input]]\nhash = \"vehicle\"\nfield = \"|\"\n");
    assert!(fields.contains(&"kickstand".to_string()), "{fields:?}");
    let to =
        labels_at("[[rule]]\nname = \"r\"\non = [\"vehicle.state.changed\"]\nwhen = 'to == \"|'\n");
    assert!(to.contains(&"parked".to_string()), "{to:?}");
    let hashes = labels_at("[[rule]]\nname = \"r\"\nwhen = \"state(\\\"|\"\n");
    assert!(hashes.contains(&"vehicle".to_string()), "{hashes:?}");
}

#[test]
fn a_when_in_a_basic_string_gets_escaped_quotes() {
    let (text, offset) = cursor("[[rule]]\nname = \"r\"\nwhen = \"st|\"\n");
    let (profile, report) = checked(&text);
    let facts = Facts {
        profile: Some(&profile),
        topics: &report.topics,
        envelope: Some(&report.envelope),
    };
    let state = complete(&text, offset, facts)
        .into_iter()
        .find(|c| c.label == "state(\"")
        .unwrap();
    assert_eq!(state.insert, "state(\\\"");
    assert_eq!(&text[state.replace.clone()], "st");
}

#[test]
fn definitions_in_the_profile() {
    let (text, offset) = cursor(&format!(
        "{STEP}do = \"redis\"\nlist = \"scooter:bl|inker\"\npush = \"both\"\n"
    ));
    let (profile, report) = checked(&text);
    let facts = Facts {
        profile: Some(&profile),
        topics: &report.topics,
        envelope: Some(&report.envelope),
    };
    let Some(Target::Profile { file, span }) = definition(&text, offset, facts) else {
        panic!("no definition")
    };
    assert_eq!(file, "profiles/librescoot/lists.toml");
    let source = profile.files.iter().find(|f| f.name == file).unwrap();
    // The `[[list]]` table, whose `key` names the list.
    let declared = &source.text[span.start..];
    assert!(
        declared.starts_with("[[list]]\nkey = \"scooter:blinker\""),
        "{declared}"
    );
}
