//! `v1.set-enabled` with `"enabled": null` (`ruled ctl set-enabled NAME
//! default`, docs/operating.md#turning-a-rule-off-or-on): the override is
//! forgotten, live and in `NS:overrides`, and the rule is again what its
//! bundle says. An override for a rule the bundle lacks can be removed too;
//! a rule that neither the bundle nor an override names is an error.

use super::methods::{encoded, live_run, no_rule, revision, Context, Done};
use super::overrides;
use super::protocol::SetEnabledReply;
use ruled_engine::EnableChange;

/// Removes the override of `name`.
pub(super) fn remove(ctx: &mut Context<'_>, name: String) -> Result<Done, String> {
    let bundle = ctx
        .engine
        .rule_index(&name)
        .and_then(|index| ctx.engine.payload().rules.get(index))
        .map(|spec| spec.enabled);
    let removed = ctx.overrides.get(&name);
    if bundle.is_none() && removed.is_none() {
        return Err(no_rule(ctx.engine, &name));
    }
    let changed = match bundle {
        Some(enabled) => {
            ctx.engine
                .set_enabled(&name, enabled)
                .map_err(|_| no_rule(ctx.engine, &name))?
                == EnableChange::Changed
        }
        None => false,
    };
    ctx.overrides.remove(&name);
    let live_run = live_run(ctx, &name);
    tracing::info!(
        rule = %name,
        removed = removed.map(overrides::word),
        changed,
        "override removed"
    );
    let reply = SetEnabledReply {
        // `lsc`'s mutation reply (docs/operating.md#the-fields-lsc-reads).
        name: name.clone(),
        revision: revision(&ctx.facts).to_string(),
        pending_restart: false,
        message: message(bundle, removed, changed, live_run.as_deref()),
        // Ours.
        enabled: bundle,
        changed,
        override_state: Some(None),
        removed: Some(removed.map(|on| overrides::word(on).to_string())),
        live_run,
    };
    Ok(Done {
        payload: encoded(&reply)?,
        keep: Some((name, None)),
        probe: None,
    })
}

/// What the removal did, in words.
fn message(
    bundle: Option<bool>,
    removed: Option<bool>,
    changed: bool,
    live_run: Option<&str>,
) -> String {
    let Some(enabled) = bundle else {
        return "override removed; the loaded bundle has no such rule".to_string();
    };
    let state = if enabled { "on" } else { "off" };
    let mut message = match (removed, changed) {
        (None, _) => format!("had no override; {state} as its bundle says"),
        (Some(_), true) => format!("override removed: turned {state} now, as its bundle says"),
        (Some(_), false) => format!("override removed: stays {state}, as its bundle says"),
    };
    if let (false, true, Some(run)) = (enabled, changed, live_run) {
        message.push_str(&format!("; its live run {run} finishes"));
    }
    message
}
