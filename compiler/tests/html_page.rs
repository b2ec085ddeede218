//! The timeline picture (docs/simulation.md#the-timeline-picture) as a
//! person opens it: the real `rulec` writes the page, headless Chromium
//! draws it, and the marks of each kind the page counted in its DOM must
//! equal the output lines of that kind; pointing at a mark must show its
//! line. A screenshot is kept under `target/ci-artifacts/`.
//!
//! Chromium: `chromium` on the PATH (or `RULES_CHROMIUM=/path`). Without it
//! these tests fail saying how to install it, unless `RULES_SKIP_CHROMIUM`
//! is set, when they print SKIPPED and pass.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)] // test code: SKIPPED and the figures are printed

mod support;

use insta_cmd::get_cargo_bin;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::root;

/// Chromium, or `None` (after printing SKIPPED) when it is missing and
/// `RULES_SKIP_CHROMIUM` says to skip.
fn chromium(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("RULES_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path).find_map(|dir| {
                ["chromium", "chromium-browser", "google-chrome"]
                    .iter()
                    .map(|name| dir.join(name))
                    .find(|candidate| candidate.is_file())
            })
        });
    match found {
        Some(path) => Some(path),
        None if std::env::var_os("RULES_SKIP_CHROMIUM").is_some() => {
            eprintln!("{test}: SKIPPED, no chromium on the PATH (RULES_SKIP_CHROMIUM is set)");
            None
        }
        None => panic!(
            "chromium is not on the PATH; the timeline page tests draw the page in it.\n\
             Install it: `apt-get install -y chromium` (Debian; `.ci/run` does), or point \
             RULES_CHROMIUM at a Chromium or Chrome binary, or set RULES_SKIP_CHROMIUM=1 to skip."
        ),
    }
}

/// Runs a headless Chromium with `args` on `url`; its stdout. A deadline,
/// generous, so that a hung browser fails the test instead of holding CI.
fn headless(chromium: &Path, url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    // A file, not a pipe: a page's DOM is megabytes, more than a pipe
    // holds while nobody reads it.
    let out_path = profile.path().join("stdout");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("chromium did not finish within 120 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "chromium failed on {url}: {status:?}");
    String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()).into_owned()
}

/// The page's DOM after its script ran (`fragment`: `#probe`, `#bench`).
fn dump_dom(chromium: &Path, page: &Path, fragment: &str) -> String {
    let url = format!("file://{}{fragment}", page.display());
    headless(
        chromium,
        &url,
        &["--virtual-time-budget=10000", "--dump-dom"],
    )
}

/// An attribute of `<body>` in a dumped DOM, unescaped.
fn body_attr(dom: &str, name: &str) -> Option<String> {
    let body = &dom[dom.find("<body")?..];
    let body = &body[..body.find('>')?];
    let from = body.find(&format!(" {name}=\""))? + name.len() + 3;
    let value = &body[from..from + body[from..].find('"')?];
    Some(
        value
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

/// A count per kind written by the page as a JSON object (after checking
/// that no script error was).
fn counts(dom: &str, name: &str) -> BTreeMap<String, u64> {
    assert_eq!(body_attr(dom, "data-error"), None, "a script error");
    let text = body_attr(dom, name)
        .unwrap_or_else(|| panic!("no {name} on <body>: the script did not finish"));
    let object: BTreeMap<String, u64> = serde_json::from_str(&text).unwrap();
    object
}

/// `rulec ARGS` from the workspace root: stdout, after asserting success.
fn rulec(args: &[&str]) -> String {
    let output = Command::new(get_cargo_bin("rulec"))
        .current_dir(root())
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "rulec {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// `rulec simulate RULES --timeline TIMELINE --format json --html PAGE`:
/// the JSON lines printed.
fn simulate_page(rules: &str, timeline: &str, page: &Path, extra: &[&str]) -> Vec<Value> {
    let page = page.to_str().unwrap();
    let mut args = vec![
        "simulate",
        rules,
        "--timeline",
        timeline,
        "--format",
        "json",
        "--html",
        page,
    ];
    args.extend(extra);
    rulec(&args)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn kinds(lines: &[Value]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in lines {
        *counts
            .entry(line["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    counts
}

/// The entries of a timeline the page draws as marks, by kind.
fn drawn_entries(timeline: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(root().join(timeline)).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    ["event", "state", "message", "clock"]
        .into_iter()
        .filter_map(|kind| {
            let n = table.get(kind)?.as_array()?.len() as u64;
            Some((kind.to_string(), n))
        })
        .collect()
}

/// The timelines drawn, between them every kind of line the fixtures make:
/// restarts, clock jumps and replay; reloads; explain's non-fires and
/// debounce; the due backlog; failed actions, state entries and derived
/// events.
const PAGES: &[(&str, &str, &[&str])] = &[
    ("fixtures/rules", "hazards-clock-jump", &[]),
    ("fixtures/rules", "hazards-reload", &[]),
    ("fixtures/rules", "low-battery-explain", &["--explain"]),
    ("fixtures/rules-parked", "parked-backlog", &[]),
    ("fixtures/rules", "hazards-on-kickstand", &[]),
];

#[test]
fn every_output_line_is_one_mark_of_its_kind_and_pointing_shows_it() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut every_kind = BTreeMap::new();
    for (rules, name, extra) in PAGES {
        let timeline = format!("fixtures/timelines/{name}.toml");
        let page = dir.path().join(format!("{name}.html"));
        let lines = simulate_page(rules, &timeline, &page, extra);
        let dom = dump_dom(&chromium, &page, "#probe");
        let want = kinds(&lines);
        assert_eq!(counts(&dom, "data-marks"), want, "{name}: marks by kind");
        assert_eq!(
            counts(&dom, "data-entries"),
            drawn_entries(&timeline),
            "{name}: entries"
        );
        // Pointing at the first action shows its line as the text output prints it.
        let index: usize = body_attr(&dom, "data-probe-line").unwrap().parse().unwrap();
        let mut args = vec!["simulate", rules, "--timeline", &timeline];
        args.extend(*extra);
        let text = rulec(&args);
        let line = text.lines().nth(index).unwrap();
        assert_eq!(
            body_attr(&dom, "data-probe-tip").as_deref(),
            Some(line),
            "{name}"
        );
        let zoomed: f64 = body_attr(&dom, "data-probe-zoom").unwrap().parse().unwrap();
        assert!(zoomed > 1.2, "{name}: the wheel zoomed in by {zoomed}");
        every_kind.extend(want);
    }
    let drawn: Vec<&str> = every_kind.keys().map(String::as_str).collect();
    for kind in [
        "action-failed",
        "derived",
        "due-wait",
        "non-fire",
        "reload",
        "replay-drop",
        "restart",
    ] {
        assert!(
            drawn.contains(&kind),
            "no page drew a {kind} line: {drawn:?}"
        );
    }
}

/// The data of a rendered page with one more line of a kind no version of
/// the page knows, from a `finally` step: drawn with the generic mark,
/// counted, and marked as `finally`.
#[test]
fn a_kind_the_page_does_not_know_is_still_drawn_and_counted() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.html");
    let lines = simulate_page(
        "fixtures/rules",
        "fixtures/timelines/hazards-cancel.toml",
        &page,
        &[],
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let extra = r#"{"at_ms":5000,"kind":"cleanup-done","rule":"hazards-on-alarm","finally":true},"#;
    let html = html.replacen("\"lines\":[\n", &format!("\"lines\":[\n{extra}\n"), 1);
    std::fs::write(&page, html).unwrap();
    let dom = dump_dom(&chromium, &page, "");
    let mut want = kinds(&lines);
    want.insert("cleanup-done".into(), 1);
    assert_eq!(counts(&dom, "data-marks"), want);
    assert!(
        dom.contains("class=\"m k-cleanup-done other fin\""),
        "{dom}"
    );
}

#[test]
fn a_failing_test_page_rings_the_lines_in_question() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(rules.join("tests")).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, rules.join(path.file_name().unwrap())).unwrap();
        }
    }
    let test = "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n\n\
                [[expect]]\nrule = \"hazards-on-alarm\"\npush = \"off\"\nat = \"20s\"\n";
    std::fs::write(rules.join("tests/wrong.toml"), test).unwrap();
    std::fs::copy(
        root().join("fixtures/rules/tests/hazards.toml"),
        rules.join("tests/hazards.toml"),
    )
    .unwrap();
    let pages = dir.path().join("pages");
    let output = Command::new(get_cargo_bin("rulec"))
        .current_dir(dir.path())
        .args(["test", "rules", "--format", "json", "--html"])
        .arg(&pages)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let results: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let failed = results.iter().find(|r| r["status"] == "fail").unwrap();
    let written: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        written,
        ["wrong.html"],
        "one page, for the failing test only"
    );
    let dom = dump_dom(&chromium, &pages.join("wrong.html"), "");
    let marked = failed["marked"].as_array().unwrap().len();
    assert_eq!(body_attr(&dom, "data-expected"), Some(marked.to_string()));
    let total: u64 = counts(&dom, "data-marks").values().sum();
    assert_eq!(total as usize, failed["output"].as_array().unwrap().len());
}

/// A cancel that walks its `finally` steps (hazards-cancel.toml), drawn in
/// Chromium's default window: the `finally-start` line is a mark of its
/// own labelled `finally`, not the grey mark of an unknown kind; the
/// `finally` action's label says so; no label leaves its lane or the
/// picture; and the "bursts" control zooms to each burst of lines in turn.
#[test]
fn finally_is_labelled_labels_stay_in_their_lanes_and_bursts_zoom() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("cancel.html");
    let lines = simulate_page(
        "fixtures/rules",
        "fixtures/timelines/hazards-cancel.toml",
        &page,
        &[],
    );
    let dom = dump_dom(&chromium, &page, "#layout");
    assert_eq!(counts(&dom, "data-marks"), kinds(&lines));
    assert!(
        !dom.contains("k-finally-start other"),
        "finally-start drawn as a kind the page does not know"
    );
    let labels: Vec<Value> =
        serde_json::from_str(&body_attr(&dom, "data-labels").expect("#layout wrote the labels"))
            .unwrap();
    let text = |label: &Value| label["text"].as_str().unwrap().to_string();
    assert!(
        labels
            .iter()
            .any(|l| text(l) == "finally" && l["fin"] == true),
        "no `finally` label for finally-start: {labels:?}"
    );
    assert!(
        labels
            .iter()
            .any(|l| text(l).starts_with("finally scooter:") && l["fin"] == true),
        "the finally action's label: {labels:?}"
    );
    let outside: Vec<&Value> = labels.iter().filter(|l| l["inside"] != true).collect();
    assert!(outside.is_empty(), "labels outside their lane: {outside:?}");

    // Bursts: 0-300 ms, 2300-2600 ms, 4600-5000 ms (the horn's passes,
    // then the cancel), each quiet gap longer than an eighth of the whole.
    let bursts: Vec<[f64; 4]> =
        serde_json::from_str(&body_attr(&dom, "data-bursts").expect("#layout wrote the bursts"))
            .unwrap();
    let spans: Vec<(f64, f64)> = bursts.iter().map(|b| (b[0], b[1])).collect();
    assert_eq!(
        spans,
        [(0.0, 300.0), (2300.0, 2600.0), (4600.0, 5000.0)],
        "{bursts:?}"
    );
    for [t0, t1, v0, v1] in &bursts {
        assert!(v0 < t0 && t1 < v1 && v1 - v0 < 2500.0, "{bursts:?}");
    }
    for line in &lines {
        let at = line["at_ms"].as_f64().unwrap();
        let holding = spans
            .iter()
            .filter(|(t0, t1)| *t0 <= at && at <= *t1)
            .count();
        assert_eq!(holding, 1, "line at {at} ms in {holding} bursts");
    }
}

/// Where CI keeps what a test made for people to look at.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("ci-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn screenshot_of_a_fixture_page() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = artifacts();
    // The clock jump (the docs' picture), and a cancel with its `finally`
    // step at the right edge.
    for (timeline, name) in [
        ("hazards-clock-jump", "timeline"),
        ("hazards-cancel", "timeline-finally"),
    ] {
        let page = dir.join(format!("{name}.html"));
        simulate_page(
            "fixtures/rules",
            &format!("fixtures/timelines/{timeline}.toml"),
            &page,
            &[],
        );
        let png = dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&png);
        let url = format!("file://{}", page.display());
        headless(
            &chromium,
            &url,
            &[
                &format!("--screenshot={}", png.display()),
                "--window-size=1400,420",
            ],
        );
        let bytes = std::fs::read(&png).expect("chromium wrote the screenshot");
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 20_000,
            "{} bytes",
            bytes.len()
        );
        println!("screenshot: {}", png.display());
    }
}

/// A timeline of `alarms` alarms 40 s apart, every third disarmed after
/// 10 s, a restart after every 100th: about 14 output lines per alarm.
fn busy_timeline(alarms: u64) -> String {
    let mut text = String::new();
    for k in 0..alarms {
        let at = k * 40;
        text.push_str(&format!(
            "[[event]]\nat = \"{at}s\"\ntopic = \"alarm.triggered\"\nto = \"level-1-triggered\"\ndata = {{ level = 1 }}\n"
        ));
        if k % 3 == 0 {
            text.push_str(&format!(
                "[[event]]\nat = \"{}s\"\ntopic = \"alarm.disarmed\"\n",
                at + 10
            ));
        }
        if k % 100 == 99 {
            text.push_str(&format!(
                "[[restart]]\nat = \"{}s\"\ndown = \"5s\"\n",
                at + 20
            ));
        }
    }
    text
}

/// "10,000 output lines stay usable": such a page draws every line, and
/// its first drawing and a zoom's redrawing are timed (printed, not
/// asserted: CI machines differ).
#[test]
fn ten_thousand_lines_are_drawn() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let timeline = dir.path().join("busy.toml");
    std::fs::write(&timeline, busy_timeline(800)).unwrap();
    let page = dir.path().join("busy.html");
    let lines = simulate_page("fixtures/rules", timeline.to_str().unwrap(), &page, &[]);
    assert!(lines.len() >= 10_000, "{} lines", lines.len());
    let started = Instant::now();
    let dom = dump_dom(&chromium, &page, "#bench");
    let wall = started.elapsed();
    assert_eq!(counts(&dom, "data-marks"), kinds(&lines));
    println!(
        "{} lines, page {} KiB: first drawing {} ms, a zoom's redrawing {} ms (chromium run {} ms)",
        lines.len(),
        std::fs::metadata(&page).unwrap().len() / 1024,
        body_attr(&dom, "data-render-ms").unwrap(),
        body_attr(&dom, "data-zoom-ms").unwrap(),
        wall.as_millis()
    );
}

/// The data the page embeds: `--format json`'s lines, the rules they name
/// as `rulec dump --format json` shows them, the timeline's entries.
#[test]
fn embedded_data_of_a_fixture_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.html");
    let lines = simulate_page(
        "fixtures/rules",
        "fixtures/timelines/hazards-restart.toml",
        &page,
        &[],
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let open = "<script type=\"application/json\" id=\"timeline-data\">";
    let from = html.find(open).unwrap() + open.len();
    let data = &html[from..from + html[from..].find("</script>").unwrap()];
    let parsed: Value = serde_json::from_str(data).unwrap();
    assert_eq!(
        parsed["lines"].as_array().unwrap(),
        &lines,
        "the very lines --format json prints"
    );
    insta::assert_snapshot!("hazards-restart-data", data.replace("\\u003c", "<"));
}

/// The envelope's refusals in the page's data (docs/safety.md): the
/// `guarded` line names its guard, and the refusals no line names (a
/// limit's, a breaker's trip) come from the engine's log, with the limit's
/// name and the trip's pause.
#[test]
fn refusals_are_in_the_page_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = |rules: &str, name: &str, extra: &[&str]| -> Value {
        let page = dir.path().join(format!("{name}.html"));
        let timeline = format!("fixtures/timelines-safety/{name}.toml");
        simulate_page(rules, &timeline, &page, extra);
        let html = std::fs::read_to_string(&page).unwrap();
        let open = "<script type=\"application/json\" id=\"timeline-data\">";
        let from = html.find(open).unwrap() + open.len();
        let text = &html[from..from + html[from..].find("</script>").unwrap()];
        serde_json::from_str(text).unwrap()
    };
    let guarded = data("fixtures/rules", "handlebar-auto-lock", &[]);
    let lines = guarded["lines"].as_array().unwrap();
    let line = lines.iter().find(|l| l["kind"] == "guarded").unwrap();
    assert!(line["message"]
        .as_str()
        .unwrap()
        .starts_with("guard hardware-parked: "));
    assert!(lines
        .iter()
        .any(|l| l["kind"] == "run-end" && l["reason"] == "guarded"));
    assert_eq!(guarded["refusals"], serde_json::json!([]));

    let none = ["--profile", "none"];
    let limited = data("fixtures/rules-envelope", "limited", &none);
    let refusals = limited["refusals"].as_array().unwrap();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["code"], "limited");
    assert_eq!(refusals[0]["rule"], "lock-on-kickstand");
    assert_eq!(refusals[0]["at_ms"], 4000);
    assert!(refusals[0]["message"]
        .as_str()
        .unwrap()
        .contains("limit `bars`"));

    let tripped = data(
        "fixtures/rules-envelope",
        "tripped",
        &["--profile", "none", "--explain"],
    );
    let refusals = tripped["refusals"].as_array().unwrap();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["code"], "tripped");
    assert_eq!(refusals[0]["at_ms"], 2000);
    let non_fires = tripped["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "non-fire" && l["reason"] == "tripped")
        .count();
    assert_eq!(non_fires, 2, "the trip's trigger and the one in the pause");
    // The tripped rule's dump carries its pause, which the page draws.
    let rule = &tripped["rules"][0];
    assert_eq!(rule["name"], "blink-on-kickstand");
    assert_eq!(rule["trip"]["pause_ns"], 60_000_000_000_i64);
}

/// Each refusal drawn so that it stands apart: a guard's refusal as its
/// own mark labelled with the guard, a run ended `guarded` or `limited`
/// in its own colour and labelled with the limit, a tripped rule's pause
/// as a band over its lane and its refused triggers as crosses; every
/// line still one mark of its kind.
#[test]
fn refusals_are_drawn_apart_with_their_reason_and_name() {
    let Some(chromium) = chromium("html_page") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pages = [
        ("fixtures/rules", "handlebar-auto-lock", vec![]),
        (
            "fixtures/rules-envelope",
            "limited",
            vec!["--profile", "none"],
        ),
        (
            "fixtures/rules-envelope",
            "tripped",
            vec!["--profile", "none", "--explain"],
        ),
    ];
    let mut labels = Vec::new();
    let mut doms = String::new();
    for (rules, name, extra) in &pages {
        let page = dir.path().join(format!("{name}.html"));
        let timeline = format!("fixtures/timelines-safety/{name}.toml");
        let lines = simulate_page(rules, &timeline, &page, extra);
        let dom = dump_dom(&chromium, &page, "#layout");
        assert_eq!(
            body_attr(&dom, "data-error"),
            None,
            "{name}: a script error"
        );
        assert_eq!(
            counts(&dom, "data-marks"),
            kinds(&lines),
            "{name}: marks by kind"
        );
        let drawn: Vec<Value> =
            serde_json::from_str(&body_attr(&dom, "data-labels").unwrap()).unwrap();
        labels.extend(
            drawn
                .iter()
                .map(|l| l["text"].as_str().unwrap().to_string()),
        );
        // The marks as drawn at the fit: `#layout` ends zoomed into the
        // last burst, where the earlier marks are out of view.
        doms.push_str(&dump_dom(&chromium, &page, ""));
    }
    for class in [
        "m k-guarded",
        "m k-run-end r-guarded",
        "m k-run-end r-limited",
        "s run r-guarded",
        "s run r-limited",
        "s tripped",
        "m k-non-fire r-tripped",
    ] {
        assert!(doms.contains(class), "nothing drawn as `{class}`");
    }
    // A label may be cut short (`guarded by hard…`) where marks crowd.
    for label in ["guarded by", "limited by", "tripped"] {
        assert!(
            labels.iter().any(|l| l.starts_with(label)),
            "no label `{label}`: {labels:?}"
        );
    }
}
