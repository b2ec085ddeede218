//! `rulec schema` prints one JSON Schema document on stdout.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::process::Command;

#[test]
fn schema_is_json_on_stdout() {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(output.stderr.is_empty());
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let rule = &schema["properties"]["rule"]["items"];
    assert_eq!(rule["required"], serde_json::json!(["name", "on", "step"]));
    assert_eq!(
        rule["properties"]["concurrency"]["enum"],
        serde_json::json!(["restart", "drop", "queue"])
    );
    // `rulec check` counts the interface name in bytes; the schema can only
    // count characters, and says so.
    let step = &rule["properties"]["step"]["items"]["properties"];
    let iface = &step["iface"];
    assert_eq!(iface["maxLength"], 15);
    let description = iface["description"].as_str().unwrap();
    assert!(
        description.contains("15 bytes") && description.contains("counts characters"),
        "{description}"
    );
}
