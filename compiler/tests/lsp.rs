//! `rulec lsp` driven over stdio like an editor (docs/editors.md): open a
//! rule file with a misspelt topic, get the warning and its fix, apply the
//! code action, get no diagnostics; hover a `state()` call; complete a
//! `push` value; a timeline's problem placed on its key; go to a topic's
//! definition.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use insta_cmd::get_cargo_bin;
use serde_json::{json, Value};
use support::lsp_client::{apply_edits, url, Client};

const RULE: &str = r#"[[rule]]
name = "hazards-when-parked"
on = ["vehicle.sate.changed"]
when = 'state("vehicle", "state") == "parked"'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
"#;

fn position(text: &str, needle: &str, past: usize) -> Value {
    let at = text.find(needle).unwrap() + past;
    let line = text[..at].matches('\n').count();
    let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1);
    json!({ "line": line, "character": column })
}

fn open(client: &mut Client, uri: &str, text: &str) {
    client.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "toml", "version": 1, "text": text } }),
    );
}

#[test]
fn a_typo_its_fix_hover_and_completion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parked.toml");
    std::fs::write(&path, RULE).unwrap();
    let uri = url(&path);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    open(&mut client, &uri, RULE);

    let diagnostics = client.diagnostics(&uri, Some(1));
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    let warning = &diagnostics[0];
    // One edit from a derived topic: an error (DESIGN 24).
    assert_eq!(warning["code"], "rulec::near-miss-topic");
    assert_eq!(warning["severity"], 1, "an error");
    assert_eq!(
        warning["range"]["start"],
        position(RULE, "\"vehicle.sate", 0)
    );
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.contains("did you mean `vehicle.state.changed`?"),
        "{message}"
    );

    let actions = client.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": uri },
            "range": warning["range"],
            "context": { "diagnostics": [warning] },
        }),
    );
    let actions = actions.as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:#?}");
    assert_eq!(actions[0]["kind"], "quickfix");
    let edits = actions[0]["edit"]["changes"][&uri].as_array().unwrap();
    let fixed = apply_edits(RULE, edits);
    assert!(
        fixed.contains(r#"on = ["vehicle.state.changed"]"#),
        "{fixed}"
    );
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": edits
            .iter()
            .map(|edit| json!({ "range": edit["range"], "text": edit["newText"] }))
            .collect::<Vec<_>>() }),
    );
    assert_eq!(client.diagnostics(&uri, Some(2)), Vec::<Value>::new());

    let hover = client.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": uri }, "position": position(&fixed, "\"vehicle\", \"state\"", 3) }),
    );
    let shown = hover["contents"]["value"].as_str().unwrap();
    for value in ["stand-by", "parked", "ready-to-drive"] {
        assert!(shown.contains(&format!("`{value}`")), "{shown}");
    }
    assert!(shown.contains("announced"), "{shown}");

    let typed =
        format!("{fixed}\n[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"");
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 3 }, "contentChanges": [{ "text": typed }] }),
    );
    let lines = typed.matches('\n').count();
    let column = typed.len() - typed.rfind('\n').unwrap() - 1;
    let completion = client.request(
        "textDocument/completion",
        json!({ "textDocument": { "uri": uri }, "position": { "line": lines, "character": column } }),
    );
    let mut labels: Vec<&str> = completion["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["label"].as_str().unwrap())
        .collect();
    labels.sort_unstable();
    assert_eq!(labels, ["both", "left", "off", "right"]);

    assert!(client.stop().success());
}

const TOPICS: &str = r#"[[topic]]
name = "seat.heater.changed"
from = true
to = true
data = { level = "int" }
"#;

const HEATER: &str = r#"[[rule]]
name = "heater"
on = ["seat.heater.changed", "vehicle.state.changed"]
cooldown = "5s"
when = 'data.'

[[rule.step]]
do = "exec"
command = "/usr/bin/true"
"#;

const TIMELINE: &str = r#"[[event]]
at = "0s"
tpoic = "seat.heater.changed"
"#;

fn labels(completion: &Value) -> Vec<String> {
    completion["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["label"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn definitions_completion_in_when_and_a_timeline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    std::fs::write(dir.path().join("00-topics.toml"), TOPICS).unwrap();
    let rules = dir.path().join("10-heater.toml");
    let uri = url(&rules);
    let mut client = Client::start(&get_cargo_bin("rulec"), dir.path(), &[]);
    // Not yet saved: the buffer alone is the file.
    open(&mut client, &uri, HEATER);
    let diagnostics = client.diagnostics(&uri, Some(1));
    assert!(
        diagnostics.iter().any(|d| d["code"] == "rulec::when::syntax" || d["code"] == "rulec::when::unknown-name"),
        "{diagnostics:#?}"
    );

    let at = |needle: &str, past: usize| json!({ "textDocument": { "uri": uri }, "position": position(HEATER, needle, past) });
    let declared = client.request("textDocument/definition", at("seat.heater", 2));
    assert_eq!(declared["uri"], url(&dir.path().join("00-topics.toml")));
    assert_eq!(declared["range"]["start"]["line"], 0);
    let derived = client.request("textDocument/definition", at("vehicle.state", 2));
    let profile_file = derived["uri"].as_str().unwrap();
    assert!(profile_file.ends_with("/vehicle.toml"), "{derived}");
    let on_disk = std::fs::read_to_string(profile_file.trim_start_matches("file://")).unwrap();
    assert!(
        on_disk.contains("topic = \"vehicle.state.changed\""),
        "{profile_file}"
    );

    let data = client.request("textDocument/completion", at("data.", 5));
    assert!(labels(&data).contains(&"data.level".to_string()), "{data}");
    let hover = client.request("textDocument/hover", at("cooldown", 2));
    assert!(
        hover["contents"]["value"]
            .as_str()
            .unwrap()
            .contains("duration"),
        "{hover}"
    );
    let topics = client.request("textDocument/completion", at("vehicle.state", 4));
    let topics = labels(&topics);
    for topic in [
        "seat.heater.changed",
        "vehicle.state.changed",
        "vehicle.kickstand.down",
    ] {
        assert!(topics.contains(&topic.to_string()), "{topics:?}");
    }
    let keys = client.request(
        "textDocument/completion",
        json!({ "textDocument": { "uri": uri }, "position": { "line": 5, "character": 0 } }),
    );
    assert!(labels(&keys).contains(&"debounce".to_string()), "{keys}");

    let timeline = dir.path().join("tests").join("heater.toml");
    let timeline_uri = url(&timeline);
    open(&mut client, &timeline_uri, TIMELINE);
    let found = client.diagnostics(&timeline_uri, Some(1));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["code"], "rulec::timeline");
    assert_eq!(found[0]["range"]["start"], position(TIMELINE, "tpoic", 0));
    let actions = client.request(
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": timeline_uri }, "range": found[0]["range"], "context": { "diagnostics": found } }),
    );
    let edits = actions[0]["edit"]["changes"][&timeline_uri]
        .as_array()
        .unwrap();
    assert_eq!(
        apply_edits(TIMELINE, edits),
        TIMELINE.replace("tpoic", "topic")
    );

    assert!(client.stop().success());
}
