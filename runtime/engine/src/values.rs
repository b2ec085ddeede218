//! A step's computed values at submission (docs/rules.md#computed-values):
//! each `${...}` rendered against the run's event and the state now, and a
//! `notify` made into the `publish` of its JSON (docs/rules.md#the-notify-action).

use rulecore::bundle::{Action, Text, NOTIFY_CHANNEL};
use rulecore::bytecode::Const;
use rulecore::event::Event;

/// The action as it is performed, when it differs from the bundle's, and
/// how many bytes of a notification's body were cut to fit the dashboard.
/// `Err`: the reason a value failed, which fails the step.
pub(crate) fn compute(
    action: &Action,
    consts: &[Const],
    event: &Event,
    state: &[String],
) -> Result<Option<(Box<Action>, usize)>, String> {
    let render = |text: &Text, key: &str| {
        text.render(consts, event, state)
            .map_err(|error| format!("`{key}`: {error}"))
    };
    let computed = match action {
        Action::Redis {
            list,
            push,
            timeout_ns,
        } if push.is_computed() => Action::Redis {
            list: list.clone(),
            push: Text::Plain(render(push, "push")?),
            timeout_ns: *timeout_ns,
        },
        Action::Publish {
            channel,
            message,
            timeout_ns,
        } if message.is_computed() => Action::Publish {
            channel: channel.clone(),
            message: Text::Plain(render(message, "message")?),
            timeout_ns: *timeout_ns,
        },
        Action::Notify(notification) => {
            let title = render(&notification.title, "title")?;
            let body = render(&notification.body, "body")?;
            let (message, cut) = notification.message(&title, &body).ok_or_else(|| {
                format!(
                    "`title`: {} bytes computed, too long for the dashboard's 4096 even with an empty body",
                    title.len()
                )
            })?;
            let publish = Action::Publish {
                channel: NOTIFY_CHANNEL.to_string(),
                message: Text::Plain(message),
                timeout_ns: notification.timeout_ns,
            };
            return Ok(Some((Box::new(publish), cut)));
        }
        Action::Redis { .. } | Action::Publish { .. } | Action::Exec { .. } | Action::Can(_) => {
            return Ok(None)
        }
    };
    Ok(Some((Box::new(computed), 0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rulecore::bundle::{Notification, Severity, DEFAULT_TIMEOUT_NS, MAX_NOTIFICATION_BYTES};
    use rulecore::bytecode::{EventField, Op, Program};
    use rulecore::template::{Part, Template};

    fn notification(title: Text, body: Text) -> Action {
        Action::Notify(Box::new(Notification {
            id: "low-battery".into(),
            title,
            body,
            severity: Severity::Warning,
            ttl_ms: 5_000,
            dismiss: false,
            timeout_ns: DEFAULT_TIMEOUT_NS,
        }))
    }

    fn to_template(before: &str) -> Text {
        Text::Computed(Box::new(Template {
            source: format!("{before}${{to}}"),
            parts: Box::new([
                Part::Literal(before.into()),
                Part::Expr(Program {
                    ops: vec![Op::Field(EventField::To)],
                }),
            ]),
        }))
    }

    fn event(to: &str) -> Event {
        Event {
            topic: "battery:0.charge.changed".into(),
            to: Some(to.into()),
            ..Event::default()
        }
    }

    #[test]
    fn plain_redis_and_exec_need_nothing_computed() {
        let action = Action::redis("scooter:blinker", "both");
        assert_eq!(compute(&action, &[], &event("1"), &[]), Ok(None));
    }

    #[test]
    fn a_notification_is_the_publish_of_its_exact_json() {
        let action = notification(Text::from("Battery low"), to_template("at "));
        let Some((computed, 0)) = compute(&action, &[], &event("17"), &[]).unwrap() else {
            panic!("not computed, or cut");
        };
        let Action::Publish {
            channel, message, ..
        } = *computed
        else {
            panic!("{computed:?}");
        };
        assert_eq!(channel, "scootui:notification");
        assert_eq!(
            message.plain(),
            Some(
                r#"{"source":"rules","id":"low-battery","action":"show","title":"Battery low","body":"at 17","severity":"warning","ttl_ms":5000}"#
            )
        );
    }

    #[test]
    fn a_long_computed_body_is_cut_to_fit_and_a_long_title_fails() {
        let long = "é".repeat(3_000);
        let action = notification(Text::from("Battery"), to_template(""));
        let Some((computed, cut)) = compute(&action, &[], &event(&long), &[]).unwrap() else {
            panic!();
        };
        let message = match *computed {
            Action::Publish { message, .. } => message.plain().unwrap().to_string(),
            other => panic!("{other:?}"),
        };
        assert!(message.len() <= MAX_NOTIFICATION_BYTES, "{}", message.len());
        assert!(cut > 0 && cut < long.len());
        assert!(serde_json::from_str::<serde_json::Value>(&message).is_ok());
        let action = notification(to_template(""), Text::from(""));
        let error = compute(&action, &[], &event(&long), &[]).unwrap_err();
        assert!(error.contains("title"), "{error}");
    }
}
