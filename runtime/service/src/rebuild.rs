//! `ruled rebuild` (docs/service.md#ruled-rebuild): the rules directory
//! compiled by the installed `rulec build` into the bundle (which `rulec`
//! replaces atomically, and leaves alone when the rules have errors), the
//! running `ruled` asked to reload it (`v1.reload`), and the outcome kept
//! in the hash `NS:rebuild`, which `v1.status` reports
//! (docs/operating.md#the-last-rebuild).

use crate::connection::describe;
use crate::control::client::{self, CallError, Target};
use crate::control::protocol::{RebuildRecord, ReloadReply};
use crate::rules_dir::{self, RulecOutput, RulesDir};
use rulecore::text::cut;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// How long `rulec build` may take.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest first error kept in `NS:rebuild`, and read back.
pub const MAX_ERROR_BYTES: usize = 1024;
/// The fields of `NS:rebuild`, each read at most [`MAX_ERROR_BYTES`].
const FIELDS: &[&str] = &[
    "at-ms",
    "ok",
    "first-error",
    "errors",
    "warnings",
    "bundle",
    "rules",
];

/// What `ruled rebuild` works on.
#[derive(Debug, Clone)]
pub struct Rebuild {
    pub rules: RulesDir,
    pub bundle: PathBuf,
    /// `NS:rebuild` ([`crate::namespace::Namespace::rebuild`]).
    pub key: String,
}

/// One rebuild's outcome: what `NS:rebuild` keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub at_ms: i64,
    pub ok: bool,
    pub first_error: Option<String>,
    pub errors: usize,
    pub warnings: usize,
    /// The bundle id `rulec` wrote, and its rules.
    pub bundle: Option<String>,
    pub rules: Option<u64>,
}

/// Builds, asks the running `ruled` to reload, keeps the outcome; the
/// diagnostics and what happened go to stderr (the journal). `target`
/// reaches the running `ruled`.
#[allow(clippy::print_stderr)] // the journal of `ruled-rules.service`
pub async fn run(rebuild: &Rebuild, target: &Target) -> Outcome {
    let mut outcome = build(rebuild).await;
    if outcome.ok {
        match client::call(target, "v1.reload", json!({})).await {
            Ok(reply) => {
                let reply = ReloadReply::deserialize(&reply).ok();
                eprintln!(
                    "ruled reloaded: bundle {}{}",
                    reply.as_ref().map_or("?", |reply| reply.bundle.as_str()),
                    if reply.as_ref().is_some_and(|reply| reply.unchanged) {
                        " (unchanged)"
                    } else {
                        ""
                    }
                );
            }
            // Not running: it loads the new bundle when it starts.
            Err(CallError::NoAnswer(why)) => {
                eprintln!("ruled did not answer ({why}); it loads the new bundle when it starts");
            }
            Err(e) => {
                let error = format!("the bundle was written, but ruled did not reload it: {e}");
                eprintln!("error: {error}");
                outcome.ok = false;
                outcome.first_error = Some(error);
            }
        }
    }
    if let Err(e) = record(target, &rebuild.key, &outcome).await {
        eprintln!(
            "warning: the outcome was not kept in `{}`: {e}",
            rebuild.key
        );
    }
    outcome
}

/// Runs `rulec build DIR -o BUNDLE --format json`; prints its diagnostics
/// as text.
#[allow(clippy::print_stderr)] // the journal of `ruled-rules.service`
async fn build(rebuild: &Rebuild) -> Outcome {
    let mut outcome = Outcome {
        at_ms: now_ms(),
        ..Outcome::default()
    };
    let args = [
        "build".as_ref(),
        rebuild.rules.dir.as_os_str(),
        "-o".as_ref(),
        rebuild.bundle.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
    ];
    let output = match rules_dir::run_rulec(&rebuild.rules.rulec, &args, BUILD_TIMEOUT).await {
        Ok(output) => output,
        Err(e) => {
            eprintln!("error: {e}");
            outcome.first_error = Some(e.to_string());
            return outcome;
        }
    };
    read_build(&mut outcome, &output, &rebuild.rules.dir);
    for (_, line) in rules_dir::diagnostics(&output.stdout, &rebuild.rules.dir) {
        eprintln!("{line}");
    }
    eprint!("{}", output.stderr);
    outcome
}

/// What `rulec build --format json` said: its diagnostics, the bundle
/// line, and its exit code.
fn read_build(outcome: &mut Outcome, output: &RulecOutput, dir: &std::path::Path) {
    let diagnostics = rules_dir::diagnostics(&output.stdout, dir);
    outcome.errors = diagnostics.iter().filter(|(error, _)| *error).count();
    outcome.warnings = diagnostics.len() - outcome.errors;
    let bundle_line = output
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line.get("bundle").is_some());
    if let Some(line) = bundle_line {
        outcome.bundle = line["bundle"].as_str().map(str::to_string);
        outcome.rules = line["rules"].as_u64();
    }
    outcome.ok = output.code == Some(0);
    if !outcome.ok {
        // The first error, else (a usage or I/O failure) rulec's first line.
        let first = diagnostics
            .into_iter()
            .find(|(error, _)| *error)
            .map(|(_, text)| text)
            .or_else(|| {
                let line = output.stderr.lines().find(|l| !l.trim().is_empty())?;
                Some(line.trim().to_string())
            })
            .unwrap_or_else(|| format!("rulec build exited with {:?}", output.code));
        outcome.first_error = Some(first);
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// Replaces `NS:rebuild` with `outcome`, in one transaction.
async fn record(target: &Target, key: &str, outcome: &Outcome) -> Result<(), String> {
    let mut con = target
        .client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| describe(&e))?;
    let mut fields: Vec<(&str, String)> = vec![
        ("at-ms", outcome.at_ms.to_string()),
        ("ok", outcome.ok.to_string()),
        ("errors", outcome.errors.to_string()),
        ("warnings", outcome.warnings.to_string()),
    ];
    if let Some(error) = &outcome.first_error {
        fields.push(("first-error", cut(error, MAX_ERROR_BYTES).to_string()));
    }
    if let Some(bundle) = &outcome.bundle {
        fields.push(("bundle", cut(bundle, MAX_ERROR_BYTES).to_string()));
    }
    if let Some(rules) = outcome.rules {
        fields.push(("rules", rules.to_string()));
    }
    redis::pipe()
        .atomic()
        .del(key)
        .hset_multiple(key, &fields)
        .query_async::<()>(&mut con)
        .await
        .map_err(|e| describe(&e))
}

/// Reads each field of `KEYS[1]` named in `ARGV[2..]` whose length is at
/// most `ARGV[1]` (checked first: a longer value is never read); a longer
/// or missing one answers `false`.
const READ_SCRIPT: &str = r"
local max = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  if redis.call('HSTRLEN', KEYS[1], ARGV[i]) <= max then
    out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i])
  else
    out[#out + 1] = false
  end
end
return out
";

/// The last rebuild, as `v1.status` reports it (`None`: none recorded),
/// read bounded from `key`.
pub async fn read_last(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> Result<Option<RebuildRecord>, String> {
    let values: Vec<Option<String>> = redis::cmd("EVAL")
        .arg(READ_SCRIPT)
        .arg(1)
        .arg(key)
        .arg(MAX_ERROR_BYTES)
        .arg(FIELDS)
        .query_async(con)
        .await
        .map_err(|e| describe(&e))?;
    let field = |name: &str| {
        let at = FIELDS.iter().position(|f| *f == name)?;
        values.get(at).cloned().flatten()
    };
    let Some(at_ms) = field("at-ms").and_then(|at| at.parse::<i64>().ok()) else {
        return Ok(None);
    };
    let number = |name: &str| field(name).and_then(|n| n.parse::<u64>().ok());
    Ok(Some(RebuildRecord {
        at_ms,
        ok: field("ok").as_deref() == Some("true"),
        first_error: field("first-error"),
        errors: number("errors"),
        warnings: number("warnings"),
        bundle: field("bundle"),
        rules: number("rules"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_build_keeps_its_first_error() {
        let mut outcome = Outcome::default();
        let output = RulecOutput {
            code: Some(1),
            stdout: concat!(
                "{\"file\":\"a.toml\",\"line\":2,\"severity\":\"warning\",\"code\":\"w\",\"message\":\"meh\"}\n",
                "{\"file\":\"b.toml\",\"line\":4,\"severity\":\"error\",\"code\":\"e\",\"message\":\"bad\"}\n",
            )
            .to_string(),
            stderr: "2 files: 1 error\n".to_string(),
        };
        read_build(&mut outcome, &output, std::path::Path::new("/r"));
        assert!(!outcome.ok);
        assert_eq!((outcome.errors, outcome.warnings), (1, 1));
        assert_eq!(
            outcome.first_error.as_deref(),
            Some("b.toml:4: error[e]: bad")
        );
        let usage = RulecOutput {
            code: Some(2),
            stdout: String::new(),
            stderr: "\nerror: rules/ does not exist\n".to_string(),
        };
        read_build(&mut outcome, &usage, std::path::Path::new("/r"));
        assert_eq!(
            outcome.first_error.as_deref(),
            Some("error: rules/ does not exist")
        );
        assert_eq!(cut("ééé", 3), "é");
    }
}
