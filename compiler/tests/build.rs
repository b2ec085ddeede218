//! `rulec build` and `rulec dump` (docs/bundle.md): deterministic bundles,
//! fingerprints that survive reformatting and change with behaviour, and
//! snapshots of the dump of every valid rule set under `fixtures/`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::dump::{render_json, render_text};
use rulec::session::Session;
use rulecore::codec::decode;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// Builds `dir`, which must be free of errors.
fn build_dir(dir: &Path) -> Vec<u8> {
    let report = Session::new(None).check(dir).unwrap();
    assert_eq!(
        report.errors(),
        0,
        "{}: {:#?}",
        dir.display(),
        report.diagnostics
    );
    report.build().unwrap().bytes
}

/// `rule name -> [step fingerprints]`.
fn fingerprints(bytes: &[u8]) -> BTreeMap<String, Vec<String>> {
    decode(bytes)
        .unwrap()
        .payload
        .rules
        .iter()
        .map(|rule| {
            let fps = rule
                .steps
                .iter()
                .map(|s| s.fingerprint.to_string())
                .collect();
            (rule.name.to_string(), fps)
        })
        .collect()
}

/// The `*.toml` files of a directory, by name.
fn read_rules(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&p).unwrap())
        })
        .collect()
}

fn write_rules(dir: &Path, files: &BTreeMap<String, String>) {
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap();
    }
}

/// Every rule set under `fixtures/` that is expected to compile cleanly:
/// each `fixtures/rules*` directory and each directory in `fixtures/valid/`.
fn valid_sets() -> Vec<(String, PathBuf)> {
    let dirs = |parent: PathBuf, prefix: &str| -> Vec<(String, PathBuf)> {
        let Ok(entries) = fs::read_dir(&parent) else {
            return Vec::new();
        };
        entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
            .filter(|(name, _)| name.starts_with(prefix))
            .collect()
    };
    let mut sets = dirs(fixtures(), "rules");
    sets.extend(
        dirs(fixtures().join("valid"), "")
            .into_iter()
            .map(|(name, p)| (format!("valid-{name}"), p)),
    );
    sets.sort();
    assert!(sets.iter().any(|(name, _)| name == "rules"));
    sets
}

#[test]
fn same_rules_give_identical_bytes() {
    let dir = fixtures().join("rules");
    let first = build_dir(&dir);
    let second = build_dir(&dir);
    assert_eq!(first, second);

    // A copy elsewhere (different absolute path) gives the same bytes too.
    let copy = tempfile::tempdir().unwrap();
    write_rules(copy.path(), &read_rules(&dir));
    assert_eq!(build_dir(copy.path()), first);
}

#[test]
fn reformatting_keeps_every_fingerprint() {
    let original_dir = fixtures().join("rules");
    let original = fingerprints(&build_dir(&original_dir));
    let mut files = read_rules(&original_dir);
    let all: String = files.values().cloned().collect();
    assert!(all.contains("\"30s\""), "fixture has a 30s duration");

    for text in files.values_mut() {
        // White space around keys and blank lines.
        *text = text.replace(" = ", "   =  ").replace('\n', "\n\n");
        // Durations written differently.
        *text = text
            .replace("\"30s\"", "\"30000ms\"")
            .replace("\"1.5s\"", "\"1500ms\"")
            .replace("\"15m\"", "\"900s\"")
            .replace("\"300ms\"", "\"0.3s\"");
        // White space inside `when` expressions.
        *text = text.replace(" == ", "==").replace(" && ", "  &&  ");
    }
    // Move the first rule of the first file with rules to a new, last file.
    let (first_name, first_text) = files
        .iter()
        .find(|(_, t)| t.contains("[[rule]]"))
        .map(|(n, t)| (n.clone(), t.clone()))
        .unwrap();
    let starts: Vec<usize> = first_text
        .match_indices("[[rule]]")
        .map(|(i, _)| i)
        .collect();
    assert!(starts.len() >= 2, "the first fixture file has two rules");
    let moved = first_text[starts[0]..starts[1]].to_string();
    files.insert(
        first_name,
        format!("{}{}", &first_text[..starts[0]], &first_text[starts[1]..]),
    );
    files.insert("zz-moved.toml".into(), moved);

    let dir = tempfile::tempdir().unwrap();
    write_rules(dir.path(), &files);
    let reformatted = fingerprints(&build_dir(dir.path()));
    assert_eq!(reformatted, original);
}

#[test]
fn behaviour_changes_change_that_fingerprint_only() {
    let original_dir = fixtures().join("rules");
    let original = fingerprints(&build_dir(&original_dir));
    let files = read_rules(&original_dir);
    // (what, edit, how many step fingerprints it must change)
    type Case = (&'static str, fn(&str) -> String, usize);
    let cases: Vec<Case> = vec![
        (
            "push",
            |t| t.replacen("push = \"off\"", "push = \"on\"", 1),
            1,
        ),
        (
            "list",
            |t| t.replacen("list = \"scooter:horn\"", "list = \"scooter:hor\"", 1),
            1,
        ),
        (
            "after",
            |t| t.replacen("after = \"30s\"", "after = \"31s\"", 1),
            1,
        ),
        (
            "durable",
            |t| t.replacen("durable = false", "durable = true", 1),
            1,
        ),
        (
            "step when",
            |t| t.replacen("push = \"off\"", "push = \"off\"\nwhen = \"true\"", 1),
            1,
        ),
        (
            "timeout",
            |t| t.replacen("timeout = \"5s\"", "timeout = \"6s\"", 1),
            1,
        ),
        (
            "command",
            |t| t.replacen("log-battery-state\"", "log-battery-states\"", 1),
            1,
        ),
        (
            "can data",
            |t| t.replacen("data = \"0000\"", "data = \"0001\"", 1),
            1,
        ),
        (
            "can id",
            |t| t.replacen("id = \"0x3A1\"", "id = \"0x3A2\"", 1),
            1,
        ),
        // The rule's own `when` gates the start of a run; a pending step is
        // past it, so it is not part of any step's fingerprint.
        (
            "rule when",
            |t| t.replacen("int(to) < 15", "int(to) < 16", 1),
            0,
        ),
        // Neither are names nor rule settings.
        (
            "cooldown",
            |t| t.replacen("cooldown = \"10m\"", "cooldown = \"11m\"", 1),
            0,
        ),
    ];
    for (what, edit, expected) in cases {
        let mut changed_files = files.clone();
        let mut hit = false;
        for text in changed_files.values_mut() {
            let new = edit(text);
            if new != *text {
                *text = new;
                hit = true;
                break;
            }
        }
        assert!(hit, "{what}: the fixture has nothing to edit");
        let dir = tempfile::tempdir().unwrap();
        write_rules(dir.path(), &changed_files);
        let changed = fingerprints(&build_dir(dir.path()));
        let differing: Vec<_> = original
            .iter()
            .flat_map(|(rule, fps)| {
                fps.iter()
                    .zip(&changed[rule])
                    .enumerate()
                    .filter(|(_, (a, b))| a != b)
                    .map(move |(i, _)| format!("{rule}#{i}"))
            })
            .collect();
        assert_eq!(differing.len(), expected, "{what}: {differing:?}");
    }
}

#[test]
fn dump_snapshots() {
    for (name, dir) in valid_sets() {
        let bytes = build_dir(&dir);
        let bundle = decode(&bytes).unwrap();
        insta::assert_snapshot!(format!("dump-{name}"), render_text(&bundle));
        let json = serde_json::to_string_pretty(&render_json(&bundle)).unwrap();
        insta::assert_snapshot!(format!("dump-{name}-json"), json);
    }
}

/// The `when` line of `rulec dump` is rebuilt from bytecode; compiling that
/// text again must give the very same program, so what the author reads is
/// what runs (precedence, associativity, negative literals, calls).
#[test]
fn decompiled_when_recompiles_to_the_same_program() {
    use rulec::dump::decompile;
    use rulec::when::{check, lower, ConstPool};
    let texts = [
        "data.charge < 15 && state(\"vehicle\", \"state\") == \"ready-to-drive\"",
        "data.a - (data.b - data.c) > 0",
        "data.a - data.b - data.c > 0",
        "data.a / (data.b * data.c) >= 1.5",
        "-(data.x ^ 2) < -4",
        "(-data.x) ^ 2 < 4",
        "2 ^ 3 ^ 2 == 64.0",
        "2 ^ (3 ^ 2) == 512.0",
        "data.a - -3 == 5",
        "!(to == \"parked\" && from != \"\") || topic == \"x\"",
        "to == \"a\" || from == \"b\" && src == \"c\"",
        "(to == \"a\" || from == \"b\") && src == \"c\"",
        "!!(data.on == true)",
        "(data.flag == true) == (to == \"x\")",
        "if(data.level > 1, data.speed, 0.0) ^ 2 >= 56.25",
        "max(data.charge, 20, 3.5) - min(data.speed, 5.5) < 10",
        "str::to_lowercase(to + \"/\" + from) == \"parked/driving\"",
        "len(str::trim(src)) % 2 == 1 && str::ends_with(topic, \".x\")",
    ];
    // Each side in a fresh pool: indices follow first use, so the same tree
    // gives the same ops and the same pools.
    let compile = |text: &str| {
        let checked = check(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        let mut pool = ConstPool::new();
        let program = lower(&checked, &mut pool);
        let (consts, pairs) = pool.finish();
        (program, consts, pairs)
    };
    for text in texts {
        let original = compile(text);
        let shown = decompile(&original.0, &original.1, &original.2)
            .unwrap_or_else(|| panic!("{text}: not decompiled"));
        assert_eq!(compile(&shown), original, "{text} -> {shown}");
    }
}

/// A step's fingerprint does not depend on its index or on the other
/// steps (docs/bundle.md): inserting a step in front, or dropping the step
/// before it, keeps the fingerprints of the steps that did not change.
#[test]
fn fingerprints_do_not_depend_on_the_index() {
    let original_dir = fixtures().join("rules");
    let original = fingerprints(&build_dir(&original_dir));
    let hazards = &original["hazards-on-alarm"];
    assert_eq!(hazards.len(), 2);
    let files = read_rules(&original_dir);
    let alarm = &files["10-alarm.toml"];
    let first_step = alarm.find("[[rule.step]]").unwrap();

    let mut inserted = files.clone();
    inserted.insert(
        "10-alarm.toml".into(),
        format!(
            "{}[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:horn\"\npush = \"on\"\n\n{}",
            &alarm[..first_step],
            &alarm[first_step..]
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    write_rules(dir.path(), &inserted);
    let with_insert = fingerprints(&build_dir(dir.path()));
    assert_eq!(&with_insert["hazards-on-alarm"][1..], &hazards[..]);

    let second_step = first_step + 1 + alarm[first_step + 1..].find("[[rule.step]]").unwrap();
    let mut dropped = files.clone();
    dropped.insert(
        "10-alarm.toml".into(),
        format!("{}{}", &alarm[..first_step], &alarm[second_step..]),
    );
    let dir = tempfile::tempdir().unwrap();
    write_rules(dir.path(), &dropped);
    let with_drop = fingerprints(&build_dir(dir.path()));
    assert_eq!(with_drop["hazards-on-alarm"], hazards[1..].to_vec());
}

/// The example rules built with the built-in profile: its sources and
/// polls in the dump's stable form (docs/rulec.md#rulec-dump), and the
/// bundle verifies (every source program, every poll interval).
#[test]
fn dump_with_the_builtin_profile() {
    use rulec::profile::{load, ProfileChoice};
    let profile = load(&ProfileChoice::Builtin)
        .unwrap()
        .map(std::sync::Arc::new);
    let report = rulec::session::Session::new(profile)
        .check(&fixtures().join("rules"))
        .unwrap();
    assert_eq!(report.errors(), 0, "{:#?}", report.diagnostics);
    let built = report.build().unwrap();
    let bundle = decode(&built.bytes).unwrap();
    let profile = bundle.payload.profile.as_ref().unwrap();
    assert_eq!(profile.name, "librescoot");
    let text = render_text(&bundle);
    let from = text.find("profile  ").unwrap();
    let to = text[from..]
        .find("\n\n")
        .map_or(text.len(), |end| from + end);
    insta::assert_snapshot!("dump-builtin-profile", &text[from..to]);
    let json = render_json(&bundle);
    assert_eq!(json["profile"]["name"], "librescoot");
    assert_eq!(json["profile"]["digest"], profile.digest.as_str());
}

/// `protected = true` (docs/operating.md#trust) reaches the bundle and
/// both dumps, changes no step fingerprint, and must be a boolean.
#[test]
fn protected_reaches_the_bundle_and_the_dump() {
    let dir = tempfile::tempdir().unwrap();
    let rule = |extra: &str| {
        format!(
            "[[rule]]\nname = \"guard\"\non = [\"alarm.triggered\"]\n{extra}\n\
             [[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"both\"\n"
        )
    };
    fs::write(dir.path().join("a.toml"), rule("")).unwrap();
    let plain = build_dir(dir.path());
    fs::write(dir.path().join("a.toml"), rule("protected = true")).unwrap();
    let protected = build_dir(dir.path());
    assert_eq!(fingerprints(&plain), fingerprints(&protected));
    let bundle = decode(&protected).unwrap();
    assert!(bundle.payload.rules[0].protected());
    assert!(!decode(&plain).unwrap().payload.rules[0].protected());
    let text = render_text(&bundle);
    assert!(text.contains("  protected    yes"), "{text}");
    assert_eq!(render_json(&bundle)["rules"][0]["protected"], true);

    fs::write(dir.path().join("a.toml"), rule("protected = \"yes\"")).unwrap();
    let report = Session::new(None).check(dir.path()).unwrap();
    assert_eq!(report.errors(), 1, "{:#?}", report.diagnostics);
}
