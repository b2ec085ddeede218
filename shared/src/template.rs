//! The values a step computes when it is submitted (docs/rules.md#computed-values):
//! `push`, `message`, `title` and `body` may hold `${expr}` segments, each a
//! `when`-language expression compiled to bytecode, turned into text as the
//! language's `str()` does. A value without a segment is [`Text::Plain`] and
//! costs nothing at run time.

use crate::bytecode::{Const, Program};
use crate::event::Event;
use crate::vm::{self, EvalError, Value};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// A value of a step: fixed, or computed from segments.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Text {
    /// The value as it is used (a `$${` in the rule file already turned
    /// into `${`).
    Plain(String),
    /// Boxed: most values are plain, and a plain one then keeps the
    /// action small.
    Computed(Box<Template>),
}

/// A value with at least one `${expr}` segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Template {
    /// The value as the rule file wrote it, for `rulec dump` and messages.
    pub source: String,
    /// The literal text and the expressions, in order.
    pub parts: Box<[Part]>,
}

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Part {
    Literal(String),
    /// Indexes the bundle's pools like a `when` program.
    Expr(Program),
}

impl Text {
    /// The value, when it needs no computing.
    pub fn plain(&self) -> Option<&str> {
        match self {
            Text::Plain(text) => Some(text),
            Text::Computed(_) => None,
        }
    }

    /// The value as written: the plain text, or the template's source.
    pub fn source(&self) -> &str {
        match self {
            Text::Plain(text) => text,
            Text::Computed(template) => &template.source,
        }
    }

    /// Whether computing the value runs a program.
    pub fn is_computed(&self) -> bool {
        matches!(self, Text::Computed(_))
    }

    /// The programs of its segments, in order (none for plain text).
    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        let parts: &[Part] = match self {
            Text::Plain(_) => &[],
            Text::Computed(template) => &template.parts,
        };
        parts.iter().filter_map(|part| match part {
            Part::Expr(program) => Some(program),
            Part::Literal(_) => None,
        })
    }

    /// The value against the run's event and the state: each segment
    /// evaluated and turned into text as `str()` does (strings as they
    /// are). The first segment that fails fails the whole value; the text
    /// is bounded by [`vm::MAX_BUILT_BYTES`].
    pub fn render(
        &self,
        consts: &[Const],
        event: &Event,
        state: &[String],
    ) -> Result<String, EvalError> {
        let template = match self {
            Text::Plain(text) => return Ok(text.clone()),
            Text::Computed(template) => template,
        };
        let mut out = String::new();
        for part in template.parts.iter() {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Expr(program) => {
                    push_value(&mut out, vm::eval(program, consts, event, state)?)?
                }
            }
            if out.len() > vm::MAX_BUILT_BYTES {
                return Err(EvalError::TooMuchText {
                    limit: vm::MAX_BUILT_BYTES,
                });
            }
        }
        Ok(out)
    }
}

/// One program's value as text, as `str()` turns it (a keyed rule's
/// `per`, docs/rules.md#keyed-runs).
pub fn render_value(
    program: &Program,
    consts: &[Const],
    event: &Event,
    state: &[String],
) -> Result<String, EvalError> {
    let mut out = String::new();
    push_value(&mut out, vm::eval(program, consts, event, state)?)?;
    Ok(out)
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        Text::Plain(text.to_string())
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        Text::Plain(text)
    }
}

/// `str(value)`'s text, appended: the one conversion the language has, so
/// `"${x}"` and `str(x)` never differ (the differential test in
/// `compiler/tests/templates.rs` holds them to it).
fn push_value(out: &mut String, value: Value<'_>) -> Result<(), EvalError> {
    match value {
        Value::Str(text) => out.push_str(&text),
        Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        // Writing into a `String` cannot fail.
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => {
            let _ = write!(out, "{f}");
        }
        Value::Empty => {
            return Err(EvalError::Type {
                op: "${...}",
                expected: "a string, number or boolean",
                found: "empty",
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::{EventField, Op};

    fn event(to: &str) -> Event {
        Event {
            to: Some(to.into()),
            ..Event::default()
        }
    }

    #[test]
    fn plain_text_is_itself_and_computed_text_renders_each_part() {
        let plain = Text::from("both");
        assert_eq!(plain.plain(), Some("both"));
        assert_eq!(plain.render(&[], &event("x"), &[]), Ok("both".to_string()));
        let computed = Text::Computed(Box::new(Template {
            source: "at ${to} %".into(),
            parts: Box::new([
                Part::Literal("at ".into()),
                Part::Expr(Program {
                    ops: vec![Op::Field(EventField::To)],
                }),
                Part::Literal(" %".into()),
            ]),
        }));
        assert_eq!(computed.plain(), None);
        assert_eq!(computed.source(), "at ${to} %");
        assert_eq!(computed.programs().count(), 1);
        assert_eq!(
            computed.render(&[], &event("17"), &[]),
            Ok("at 17 %".to_string())
        );
    }

    #[test]
    fn an_empty_value_fails_the_rendering() {
        let computed = Text::Computed(Box::new(Template {
            source: "${data.x}".into(),
            parts: Box::new([Part::Expr(Program {
                ops: vec![Op::Data(0)],
            })]),
        }));
        let consts = [Const::Path(vec!["x".into()])];
        assert!(matches!(
            computed.render(&consts, &event(""), &[]),
            Err(EvalError::Type { found: "empty", .. })
        ));
    }
}
