//! `ruled ctl`'s text output (docs/operating.md#ruled-ctl): each method's
//! reply laid out for people. `--format json` prints the reply as it came.
//! A method without a layout here is printed as indented JSON.

use ruled_engine::{RuleTrace, TimeStyle};
use serde::Deserialize;
use serde_json::Value;
use std::fmt::Write;

/// The reply of `method` as text.
pub fn text(method: &str, reply: &Value) -> String {
    let mut out = String::new();
    let _ = match method {
        "v1.status" => status(&mut out, reply),
        "v1.list" => list(&mut out, reply),
        "v1.show" => show(&mut out, reply),
        "v1.test" => test(&mut out, reply),
        "v1.pending" => pending(&mut out, reply),
        "v1.set-enabled" => set_enabled(&mut out, reply),
        "v1.trace" => trace(&mut out, reply),
        "v1.reload" => reload(&mut out, reply),
        "v1.add" => writeln!(
            out,
            "added {}: {}\nrevision {}",
            plain(&reply["name"]),
            plain(&reply["message"]),
            plain(&reply["revision"])
        ),
        _ => writeln!(out, "{}", pretty(reply)),
    };
    out
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// A value as a person reads it: strings without quotes (their control
/// characters and line breaks escaped, docs/operating.md#trust), null as `-`.
fn plain(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(text) => super::escape::field(text),
        other => other.to_string(),
    }
}

/// A Unix-ms instant as a person reads it: the number, and how far from
/// now on this machine's clock (`ruled ctl` runs beside `ruled`).
fn instant(value: &Value) -> String {
    let Some(ms) = value.as_i64() else {
        return plain(value);
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    let delta = ms.saturating_sub(now);
    let seconds = format!("{:.1}s", delta.unsigned_abs() as f64 / 1000.0);
    if delta >= 0 {
        format!("{ms} (in {seconds})")
    } else {
        format!("{ms} ({seconds} ago)")
    }
}

fn status(out: &mut String, reply: &Value) -> std::fmt::Result {
    writeln!(
        out,
        "ruled {}  pid {}",
        plain(&reply["version"]),
        plain(&reply["pid"])
    )?;
    writeln!(out, "bundle     {}", plain(&reply["bundle"]))?;
    writeln!(out, "revision   {}", plain(&reply["revision"]))?;
    writeln!(out, "rebuild    {}", last_rebuild(&reply["last-rebuild"]))?;
    writeln!(out, "namespace  {}", plain(&reply["namespace"]))?;
    let uptime = reply["uptime-ms"].as_u64().unwrap_or(0) / 1000;
    writeln!(out, "uptime     {}s", uptime)?;
    writeln!(
        out,
        "workers    {} busy of {}",
        plain(&reply["busy_workers"]),
        plain(&reply["workers"])
    )?;
    writeln!(
        out,
        "queue      {} of {}",
        plain(&reply["queue_depth"]),
        plain(&reply["queue_capacity"])
    )?;
    writeln!(
        out,
        "rules      {} in the bundle",
        plain(&reply["rules"]["total"])
    )?;
    let profile = &reply["profile"];
    if profile.is_object() {
        writeln!(
            out,
            "profile    {} {}",
            plain(&profile["name"]),
            plain(&profile["digest"])
        )?;
    } else {
        writeln!(out, "profile    none")?;
    }
    let bus = &reply["bus"];
    if bus.is_object() {
        writeln!(
            out,
            "bus        {}, sources {}: {} hashes watched, {} polls, {} owned topics",
            plain(&bus["mode"]),
            plain(&bus["sources"]),
            plain(&bus["watched-hashes"]),
            plain(&bus["polls"]),
            plain(&bus["owned-topics"])
        )?;
    }
    if let Some(counters) = reply["counters"].as_object() {
        for (name, value) in counters {
            writeln!(out, "  {name:<12} {}", plain(value))?;
        }
    }
    Ok(())
}

/// `v1.status`'s `last-rebuild` in words (docs/operating.md#the-last-rebuild).
fn last_rebuild(last: &Value) -> String {
    let Some(at) = last["at-ms"].as_i64() else {
        return match last["unreadable"].as_str() {
            Some(why) => format!("not read: {why}"),
            None => "none recorded".to_string(),
        };
    };
    let at = TimeStyle::Utc.show(at);
    if last["ok"] == Value::Bool(true) {
        format!(
            "last rebuild ok at {at}: bundle {}, {} rules",
            plain(&last["bundle"]),
            plain(&last["rules"])
        )
    } else {
        format!(
            "last rebuild failed at {at}: {}",
            plain(&last["first-error"])
        )
    }
}

fn list(out: &mut String, reply: &Value) -> std::fmt::Result {
    writeln!(
        out,
        "{:<28} {:<4} {:<6} {:<9} {:>4} {:>4} {:>6} {:>6}  LAST FIRE (unix ms)",
        "RULE", "ON", "BUNDLE", "OVERRIDE", "LIVE", "WAIT", "RUNS", "ERRORS"
    )?;
    for rule in reply["rules"].as_array().into_iter().flatten() {
        let word = |value: &Value| match value {
            Value::Bool(true) => "on",
            Value::Bool(false) => "off",
            _ => "-",
        };
        let overridden = match &rule["override"] {
            Value::Null => "none".to_string(),
            other => plain(other),
        };
        writeln!(
            out,
            "{:<28} {:<4} {:<6} {:<9} {:>4} {:>4} {:>6} {:>6}  {}",
            plain(&rule["name"]),
            // ON is the result: the bundle's `enabled` unless overridden.
            word(&rule["enabled"]),
            word(&rule["bundle-enabled"]),
            overridden,
            plain(&rule["live-runs"]),
            plain(&rule["waiting-steps"]),
            plain(&rule["runs"]),
            plain(&rule["errors"]),
            instant(&rule["last-fire"]),
        )?;
    }
    let shown = reply["rules"].as_array().map_or(0, Vec::len);
    let offset = reply["offset"].as_u64().unwrap_or(0);
    writeln!(
        out,
        "{shown} of {} rules shown from {offset}",
        plain(&reply["total"])
    )?;
    for orphan in reply["overrides-without-rule"]
        .as_array()
        .into_iter()
        .flatten()
    {
        writeln!(
            out,
            "override `{}` = {} names no rule of this bundle (kept)",
            plain(&orphan["name"]),
            plain(&orphan["override"])
        )?;
    }
    Ok(())
}

fn show(out: &mut String, reply: &Value) -> std::fmt::Result {
    let state = &reply["state"];
    // Many lines: their control characters are escaped where all output
    // is (`client::run`).
    write!(out, "{}", reply["text"].as_str().unwrap_or_default())?;
    let on = if state["enabled"] == Value::Bool(true) {
        "on"
    } else {
        "off"
    };
    writeln!(out, "now {on} (override: {})", plain(&state["override"]))?;
    match &reply["run"] {
        Value::Null => writeln!(out, "no live run")?,
        run => writeln!(
            out,
            "live run {}  {} {}  pass {}  {}  due {}",
            plain(&run["id"]),
            step_word(run),
            plain(&run["step"]),
            plain(&run["pass"]),
            plain(&run["state"]),
            instant(&run["due"])
        )?,
    }
    hold_line(out, &state["hold"])?;
    writeln!(
        out,
        "runs {}  errors {}  last fire {}",
        plain(&state["runs"]),
        plain(&state["errors"]),
        instant(&state["last-fire"])
    )
}

/// A rule's hold (`for`), when it has one running or fired.
fn hold_line(out: &mut String, hold: &Value) -> std::fmt::Result {
    match hold["state"].as_str() {
        Some("running") => writeln!(
            out,
            "hold running: fires at {}, {} left, unless `when` turns false first",
            instant(&hold["due"]),
            millis(&hold["left-ms"])
        ),
        Some("fired") => writeln!(out, "hold fired: a new one starts once `when` was false"),
        _ => Ok(()),
    }
}

/// A duration in ms as seconds (`3.2s`).
fn millis(value: &Value) -> String {
    match value.as_u64() {
        Some(ms) => format!("{:.1}s", ms as f64 / 1000.0),
        None => plain(value),
    }
}

/// `step`, or `finally step` for a run in its finally steps
/// (docs/semantics.md#finally).
fn step_word(run: &Value) -> &'static str {
    if run["finally"] == Value::Bool(true) {
        "finally step"
    } else {
        "step"
    }
}

fn when_text(when: &Value) -> String {
    match when {
        Value::Null => "(none)".to_string(),
        Value::Object(error) => {
            format!("error: {}", error.get("error").map_or(String::new(), plain))
        }
        other => plain(other),
    }
}

fn test(out: &mut String, reply: &Value) -> std::fmt::Result {
    writeln!(
        out,
        "rule {} (dry run: nothing ran, nothing was written)",
        plain(&reply["rule"])
    )?;
    writeln!(out, "  enabled  {}", plain(&reply["enabled"]))?;
    writeln!(out, "  matched  {}", plain(&reply["matched"]))?;
    if reply["cancels"] == Value::Bool(true) {
        writeln!(out, "  cancels  its live run and backlog first (cancel-on)")?;
    }
    writeln!(out, "  when     {}", when_text(&reply["when"]))?;
    for step in reply["steps"].as_array().into_iter().flatten() {
        // A finally step (docs/rules.md#finally) as `f0`, as `pending` does.
        let index = if step["finally"] == Value::Bool(true) {
            format!("f{}", plain(&step["finally-index"]))
        } else {
            plain(&step["index"])
        };
        writeln!(out, "  step {index}   when {}", when_text(&step["when"]))?;
    }
    let verdict = &reply["verdict"];
    // A running or fired hold is now, not a would (docs/semantics.md#hold).
    if matches!(verdict["kind"].as_str(), Some("holding" | "hold-fired")) {
        return writeln!(out, "  now      {}", plain(&reply["note"]));
    }
    let detail: Vec<String> = verdict
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| *key != "kind")
        .map(|(key, value)| format!("{key} {}", plain(value)))
        .collect();
    writeln!(
        out,
        "  would    {} {}",
        plain(&verdict["kind"]),
        detail.join(" ")
    )
}

fn pending(out: &mut String, reply: &Value) -> std::fmt::Result {
    writeln!(
        out,
        "{:<40} {:<24} {:>4} {:>4} {:<30} DURABLE",
        "RUN", "RULE", "STEP", "PASS", "DUE (unix ms)"
    )?;
    for step in reply["steps"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:<40} {:<24} {:>4} {:>4} {:<30} {}",
            plain(&step["run"]),
            plain(&step["rule"]),
            // A finally step (docs/semantics.md#finally) as `f0`.
            format!(
                "{}{}",
                if step["finally"] == Value::Bool(true) {
                    "f"
                } else {
                    ""
                },
                plain(&step["step"])
            ),
            plain(&step["pass"]),
            instant(&step["due"]),
            plain(&step["durable"]),
        )?;
    }
    writeln!(out, "{} waiting", plain(&reply["total"]))?;
    for hold in reply["holds"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "hold of {} running: fires at {}, {} left, unless `when` turns false first",
            plain(&hold["rule"]),
            instant(&hold["due"]),
            millis(&hold["left-ms"])
        )?;
    }
    Ok(())
}

/// Each trace as `rulec simulate --trace` prints it, times in UTC.
fn trace(out: &mut String, reply: &Value) -> std::fmt::Result {
    let traces = reply["traces"].as_array().map_or(&[][..], Vec::as_slice);
    if traces.is_empty() {
        return writeln!(
            out,
            "no trace: nothing matched since the start (or traces are off)"
        );
    }
    for trace in traces {
        match RuleTrace::deserialize(trace) {
            Ok(trace) => write!(out, "{}", trace.to_text(TimeStyle::Utc))?,
            Err(_) => writeln!(out, "{}", pretty(trace))?,
        }
    }
    // Only a page short of the whole says so (docs/operating.md#what-happened-traces).
    let shown = match reply["paged"].as_str() {
        Some("runs") => traces
            .iter()
            .map(|trace| trace["runs"].as_array().map_or(0, Vec::len))
            .sum(),
        _ => traces.len(),
    };
    let total = reply["total"].as_u64().unwrap_or(0);
    if u64::try_from(shown).unwrap_or(u64::MAX) < total {
        writeln!(
            out,
            "{shown} of {total} {} shown from {}; --offset and --limit page on",
            plain(&reply["paged"]),
            plain(&reply["offset"])
        )?;
    }
    Ok(())
}

fn reload(out: &mut String, reply: &Value) -> std::fmt::Result {
    if reply["unchanged"] == Value::Bool(true) {
        return writeln!(
            out,
            "bundle {} is loaded already: nothing changed",
            plain(&reply["bundle"])
        );
    }
    writeln!(
        out,
        "bundle {} loaded (was {})",
        plain(&reply["bundle"]),
        plain(&reply["previous"])
    )?;
    for (key, what) in [
        ("added", "added"),
        ("removed", "removed"),
        ("changed", "changed"),
    ] {
        let names: Vec<String> = reply[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(plain)
            .collect();
        if !names.is_empty() {
            writeln!(out, "rules {what}: {}", names.join(", "))?;
        }
    }
    writeln!(
        out,
        "runs kept {}, ended {}; subscribed {} channels, {} patterns",
        plain(&reply["runs-kept"]),
        plain(&reply["runs-ended"]),
        plain(&reply["channels"]),
        plain(&reply["patterns"])
    )?;
    reload_overrides(out, reply)
}

/// The overrides in force after a reload, one line each; one that
/// contradicts the bundle says so, and how to remove it.
fn reload_overrides(out: &mut String, reply: &Value) -> std::fmt::Result {
    for entry in reply["overrides"].as_array().into_iter().flatten() {
        let name = plain(&entry["name"]);
        let state = plain(&entry["override"]);
        match &entry["bundle-enabled"] {
            Value::Bool(bundle) if entry["contradicts"] == Value::Bool(true) => writeln!(
                out,
                "override {name} = {state} in force, against the bundle's enabled = {bundle}; \
                 `ruled ctl set-enabled {name} default` removes it"
            )?,
            Value::Bool(_) => writeln!(out, "override {name} = {state} in force")?,
            _ => writeln!(
                out,
                "override {name} = {state} kept; the bundle has no such rule"
            )?,
        }
    }
    Ok(())
}

fn set_enabled(out: &mut String, reply: &Value) -> std::fmt::Result {
    // An override removed (`set-enabled NAME default`) says it in words.
    if reply.get("removed").is_some() {
        return writeln!(
            out,
            "rule {}: {}",
            plain(&reply["name"]),
            plain(&reply["message"])
        );
    }
    let on = if reply["enabled"] == Value::Bool(true) {
        "on"
    } else {
        "off"
    };
    let changed = if reply["changed"] == Value::Bool(true) {
        ""
    } else {
        " (already)"
    };
    writeln!(
        out,
        "rule {} is {on}{changed}; kept across restarts",
        plain(&reply["name"])
    )?;
    if let Some(run) = reply["live-run"].as_str() {
        writeln!(out, "its live run {run} finishes")?;
    }
    Ok(())
}
