//! A bundle as stable, readable text or JSON (docs/bundle.md#rulec-dump-text):
//! what `rulec dump` prints and CI snapshots, and what `ruled`'s `v1.show`
//! answers for one rule (docs/operating.md#status-fields). The layout only
//! changes on purpose: no addresses, no hash-map order, durations in Go
//! syntax, constants shown inline in the disassembly.

use crate::bundle::{
    Action, Concurrency, Input, InputSource, Payload, Rule, StatePair, Step, FORMAT_VERSION,
};
use crate::bytecode::{Builtin, Const, EventField, Op, Program};
use crate::codec::Bundle;
use crate::duration::format_duration;
use crate::envelope::{Breaker, DeclaredIn, Envelope, Trip};
use crate::profile::{Changes, DataSpec, Origin, Profile};
use crate::template::{self, Text};
use crate::value_pattern::ValuePattern;
use crate::when_types::builtin_name;
use serde_json::{json, Value as Json};
use std::fmt::{self, Write};
use std::io;

fn duration(ns: u64) -> String {
    format_duration(i64::try_from(ns).unwrap_or(i64::MAX))
}

fn optional_duration(ns: u64) -> String {
    if ns == 0 {
        "none".to_string()
    } else {
        duration(ns)
    }
}

fn concurrency(c: Concurrency) -> &'static str {
    match c {
        Concurrency::Restart => "restart",
        Concurrency::Drop => "drop",
        Concurrency::Queue => "queue",
    }
}

fn patterns(list: &[crate::TopicPattern]) -> String {
    if list.is_empty() {
        return "-".to_string();
    }
    list.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One constant as it would be written in an expression.
fn constant(c: Option<&Const>) -> String {
    match c {
        Some(Const::Str(s)) => format!("{s:?}"),
        Some(Const::Int(i)) => i.to_string(),
        Some(Const::Float(f)) => format!("{f:?}"),
        Some(Const::Bool(b)) => b.to_string(),
        Some(Const::Path(p)) => format!("data.{}", p.join(".")),
        None => "<missing>".to_string(),
    }
}

/// The disassembly of a program, one op a line: `index  op  operand`, with
/// pool entries shown by value (the pool order is an implementation detail).
pub fn disassemble(program: &Program, consts: &[Const], state_pairs: &[StatePair]) -> Vec<String> {
    let width = program.ops.len().saturating_sub(1).to_string().len();
    program
        .ops
        .iter()
        .enumerate()
        .map(|(pc, op)| {
            let text = match *op {
                Op::Const(i) => format!("const {}", constant(consts.get(i as usize))),
                Op::Field(field) => format!(
                    "field {}",
                    match field {
                        EventField::Topic => "topic",
                        EventField::Src => "src",
                        EventField::From => "from",
                        EventField::To => "to",
                    }
                ),
                Op::Data(i) => format!("data {}", constant(consts.get(i as usize))),
                Op::State(i) => match state_pairs.get(i as usize) {
                    Some(pair) => format!("state {:?} {:?}", pair.hash, pair.field),
                    None => format!("state <missing {i}>"),
                },
                Op::Not => "not".into(),
                Op::Neg => "neg".into(),
                Op::Add => "add".into(),
                Op::Sub => "sub".into(),
                Op::Mul => "mul".into(),
                Op::Div => "div".into(),
                Op::Mod => "mod".into(),
                Op::Pow => "pow".into(),
                Op::Eq => "eq".into(),
                Op::Ne => "ne".into(),
                Op::Lt => "lt".into(),
                Op::Le => "le".into(),
                Op::Gt => "gt".into(),
                Op::Ge => "ge".into(),
                Op::AndJump(t) => format!("and-jump {t}"),
                Op::OrJump(t) => format!("or-jump {t}"),
                Op::AssertBool => "assert-bool".into(),
                Op::Call(b, n) => format!("call {} {n}", builtin_name(b)),
            };
            format!("{pc:>width$}  {text}")
        })
        .collect()
}

/// An expression part while decompiling: its text and the precedence of
/// its outermost operator (evalexpr's numbers; 200 for an atom).
type Part = (String, i32);

const ATOM: i32 = 200;
const UNARY: i32 = 110;

/// evalexpr's precedence and spelling of a binary op.
fn binary_op(op: Op) -> Option<(i32, &'static str)> {
    Some(match op {
        Op::Pow => (120, "^"),
        Op::Mul => (100, "*"),
        Op::Div => (100, "/"),
        Op::Mod => (100, "%"),
        Op::Add => (95, "+"),
        Op::Sub => (95, "-"),
        Op::Eq => (80, "=="),
        Op::Ne => (80, "!="),
        Op::Lt => (80, "<"),
        Op::Le => (80, "<="),
        Op::Gt => (80, ">"),
        Op::Ge => (80, ">="),
        _ => return None,
    })
}

/// `part` as an operand of an operator of precedence `parent`;
/// `right` for the right operand (evalexpr chains left to right).
fn operand((text, prec): Part, parent: i32, right: bool) -> String {
    if prec < parent || (right && prec == parent) {
        format!("({text})")
    } else {
        text
    }
}

/// An open `&&` / `||`: (target, symbol, precedence, left operand, depth).
type OpenJump = (usize, &'static str, i32, Part, usize);

/// One instruction of [`decompile`]: its part pushed on `stack` (or its
/// jump opened); `None` for a shape the compiler does not produce.
fn decompile_op(
    op: &Op,
    pc: usize,
    stack: &mut Vec<Part>,
    open: &mut Vec<OpenJump>,
    consts: &[Const],
    state_pairs: &[StatePair],
) -> Option<()> {
    match *op {
        Op::Const(i) => {
            let c = consts.get(i as usize)?;
            let negative = matches!(c, Const::Int(n) if *n < 0)
                || matches!(c, Const::Float(f) if f.is_sign_negative());
            let prec = if negative { UNARY } else { ATOM };
            stack.push((constant(Some(c)), prec));
        }
        Op::Field(field) => stack.push((
            match field {
                EventField::Topic => "topic",
                EventField::Src => "src",
                EventField::From => "from",
                EventField::To => "to",
            }
            .to_string(),
            ATOM,
        )),
        Op::Data(i) => stack.push((constant(Some(consts.get(i as usize)?)), ATOM)),
        Op::State(i) => {
            let pair = state_pairs.get(i as usize)?;
            stack.push((format!("state({:?}, {:?})", pair.hash, pair.field), ATOM));
        }
        Op::Not | Op::Neg => {
            let inner = stack.pop()?;
            let sym = if *op == Op::Not { "!" } else { "-" };
            // Any operator below gets parentheses: `-(a ^ b)` reads
            // unambiguously whatever the parser does with `-a ^ b`.
            stack.push((format!("{sym}{}", operand(inner, ATOM, false)), UNARY));
        }
        Op::AndJump(target) | Op::OrJump(target) => {
            let left = stack.pop()?;
            let (sym, prec) = if matches!(op, Op::AndJump(_)) {
                ("&&", 75)
            } else {
                ("||", 70)
            };
            let target = target as usize;
            if target <= pc || open.last().is_some_and(|o| o.0 < target) {
                return None;
            }
            open.push((target, sym, prec, left, stack.len()));
        }
        Op::AssertBool => {}
        Op::Call(builtin, n) => {
            let args = stack.split_off(stack.len().checked_sub(n as usize)?);
            stack.push((call_text(builtin, args), ATOM));
        }
        binary => {
            let (prec, sym) = binary_op(binary)?;
            let right = stack.pop()?;
            let left = stack.pop()?;
            stack.push((joined(left, sym, prec, right), prec));
        }
    }
    Some(())
}

/// `left sym right`, each side in parentheses where `prec` needs them.
fn joined(left: Part, sym: &str, prec: i32, right: Part) -> String {
    format!(
        "{} {sym} {}",
        operand(left, prec, false),
        operand(right, prec, true)
    )
}

/// The most text [`decompile`] builds for one program (every part it
/// makes, counted once): far more than any rule file's `when`.
pub const MAX_DECOMPILED_BYTES: usize = 256 * 1024;

/// Reconstructs a readable expression from a program: every constant and
/// state pair inline, parentheses only where evalexpr's precedence needs
/// them. It reads like the rule's `when`, normalised (spacing, grouping), so
/// an author can check what was compiled. `None` for a program that does
/// not have the shape the compiler produces.
///
/// Bounded in time and memory whatever the program holds
/// (docs/service.md#what-ruled-reads-and-its-bounds): once the text built
/// so far passes [`MAX_DECOMPILED_BYTES`], the answer is a note saying so
/// instead of the expression (a forged bundle's program of long constants
/// combined many times would otherwise ask for gigabytes).
pub fn decompile(program: &Program, consts: &[Const], state_pairs: &[StatePair]) -> Option<String> {
    let mut built = 0usize;
    let mut stack: Vec<Part> = Vec::new();
    // Open `&&` / `||`: (target, symbol, precedence, left operand, depth).
    let mut open: Vec<OpenJump> = Vec::new();
    let too_long = || {
        Some(format!(
            "<an expression of {} instructions, over {} KiB as text: not shown>",
            program.ops.len(),
            MAX_DECOMPILED_BYTES / 1024
        ))
    };
    let close = |stack: &mut Vec<Part>, open: &mut Vec<OpenJump>, pc, built: &mut usize| {
        while open.last().is_some_and(|o| o.0 == pc) {
            let (_, sym, prec, left, depth) = open.pop()?;
            let right = stack.pop()?;
            if stack.len() != depth {
                return None;
            }
            let text = joined(left, sym, prec, right);
            *built = built.saturating_add(text.len());
            stack.push((text, prec));
        }
        Some(())
    };
    for (pc, op) in program.ops.iter().enumerate() {
        close(&mut stack, &mut open, pc, &mut built)?;
        if built > MAX_DECOMPILED_BYTES {
            return too_long();
        }
        decompile_op(op, pc, &mut stack, &mut open, consts, state_pairs)?;
        built = built.saturating_add(stack.last().map_or(0, |(text, _)| text.len()));
        if built > MAX_DECOMPILED_BYTES {
            return too_long();
        }
    }
    close(&mut stack, &mut open, program.ops.len(), &mut built)?;
    if built > MAX_DECOMPILED_BYTES {
        return too_long();
    }
    match (stack.pop(), stack.is_empty() && open.is_empty()) {
        (Some((text, _)), true) => Some(text),
        _ => None,
    }
}

/// A call as written: `contains` takes its tuple's elements, then the value.
fn call_text(builtin: Builtin, args: Vec<Part>) -> String {
    let mut args: Vec<String> = args.into_iter().map(|(text, _)| text).collect();
    match (builtin, args.pop()) {
        (Builtin::TupleContains, Some(value)) => {
            format!("contains(({}), {value})", args.join(", "))
        }
        (_, last) => {
            args.extend(last);
            format!("{}({})", builtin_name(builtin), args.join(", "))
        }
    }
}

fn action_text(action: &Action) -> String {
    match action {
        Action::Redis { list, push, .. } => format!("redis LPUSH {list:?} {:?}", push.source()),
        Action::Exec { command, .. } => format!("exec {command:?}"),
        Action::Can(frame) => {
            let mut text = format!("can {} id {:#x}", frame.iface, frame.id);
            if frame.extended {
                text.push_str(" extended");
            }
            if frame.rtr {
                text.push_str(&format!(" rtr dlc {}", frame.dlc));
            } else {
                text.push_str(&format!(" data [{}]", hex(&frame.data)));
            }
            text
        }
        Action::Publish {
            channel, message, ..
        } => format!("publish {channel:?} {:?}", message.source()),
        Action::Notify(n) => {
            let verb = if n.dismiss { "dismiss" } else { "show" };
            format!(
                "notify {verb} id {:?} title {:?} body {:?} severity {} ttl {}",
                n.id,
                n.title.source(),
                n.body.source(),
                n.severity.as_str(),
                duration(u64::from(n.ttl_ms) * 1_000_000)
            )
        }
    }
}

/// The keys of an action's values, in the order of [`Action::texts`].
fn text_keys(action: &Action) -> [&'static str; 2] {
    match action {
        Action::Redis { .. } => ["push", ""],
        Action::Publish { .. } => ["message", ""],
        Action::Notify(_) => ["title", "body"],
        Action::Exec { .. } | Action::Can(_) => ["", ""],
    }
}

/// Each computed value as written, then each of its expressions with its
/// bytecode (nested under the value, so each value is one key).
fn write_texts(out: &mut impl Write, action: &Action, payload: &Payload) -> fmt::Result {
    for (key, text) in text_keys(action).into_iter().zip(action.texts()) {
        if !text.is_computed() {
            continue;
        }
        writeln!(out, "    {key:<12} {:?}", text.source())?;
        for program in text.programs() {
            let expr = decompile(program, &payload.consts, &payload.state_pairs);
            writeln!(out, "      ${{{}}}", expr.unwrap_or_default())?;
            for line in disassemble(program, &payload.consts, &payload.state_pairs) {
                writeln!(out, "        {line}")?;
            }
        }
    }
    Ok(())
}

/// A value in the JSON form: the string itself when plain; its source and
/// parts (each expression with its bytecode) when computed.
fn text_json(text: &Text, payload: &Payload) -> Json {
    match text {
        Text::Plain(text) => json!(text),
        Text::Computed(template) => json!({
            "source": template.source,
            "parts": template.parts.iter().map(|part| match part {
                template::Part::Literal(text) => json!({"text": text}),
                template::Part::Expr(program) => json!({
                    "expr": decompile(program, &payload.consts, &payload.state_pairs),
                    "ops": disassemble(program, &payload.consts, &payload.state_pairs)
                        .into_iter()
                        .map(|line| line.trim_start().to_string())
                        .collect::<Vec<_>>(),
                }),
            }).collect::<Vec<_>>(),
        }),
    }
}

fn write_when(
    out: &mut impl Write,
    indent: &str,
    when: Option<&Program>,
    payload: &Payload,
) -> fmt::Result {
    let Some(program) = when else {
        return writeln!(out, "{indent}when         always");
    };
    match decompile(program, &payload.consts, &payload.state_pairs) {
        Some(text) => writeln!(out, "{indent}when         {text}")?,
        None => writeln!(out, "{indent}when")?,
    }
    for line in disassemble(program, &payload.consts, &payload.state_pairs) {
        writeln!(out, "{indent}  {line}")?;
    }
    Ok(())
}

/// One step; `list` is `step`, or `finally` for a finally step
/// (docs/rules.md#finally).
fn write_step(
    out: &mut impl Write,
    (list, index): (&str, usize),
    step: &Step,
    payload: &Payload,
) -> fmt::Result {
    writeln!(out, "  {list} {index}")?;
    writeln!(out, "    action       {}", action_text(&step.action))?;
    writeln!(out, "    after        {}", duration(step.after_ns))?;
    writeln!(
        out,
        "    durable      {}",
        if step.durable { "yes" } else { "no" }
    )?;
    if let Some(timeout_ns) = step.action.timeout_ns() {
        writeln!(out, "    timeout      {}", duration(timeout_ns))?;
    }
    write_texts(out, &step.action, payload)?;
    writeln!(out, "    fingerprint  {}", step.fingerprint)?;
    write_when(out, "    ", step.when.as_ref(), payload)
}

fn write_schedule(out: &mut impl Write, schedule: &crate::schedule::Schedule) -> fmt::Result {
    if !schedule.at.is_empty() {
        let times: Vec<String> = schedule
            .at
            .iter()
            .map(|&s| crate::schedule::time_of_day_label(s))
            .collect();
        writeln!(out, "  at           {}", times.join(", "))?;
    }
    if schedule.every_s != 0 {
        let every = duration(u64::from(schedule.every_s) * 1_000_000_000);
        writeln!(out, "  every        {every}")?;
    }
    Ok(())
}

fn write_rule(out: &mut impl Write, rule: &Rule, payload: &Payload) -> fmt::Result {
    writeln!(out, "rule {:?} ({})", rule.name, rule.source)?;
    let status = if rule.enabled {
        "yes"
    } else {
        "no (replay-only)"
    };
    writeln!(out, "  enabled      {status}")?;
    let protected = if rule.protected() { "yes" } else { "no" };
    writeln!(out, "  protected    {protected}")?;
    writeln!(out, "  on           {}", patterns(&rule.on))?;
    // Only a scheduled rule has the lines (docs/rules.md#schedules).
    if let Some(schedule) = rule.schedule() {
        write_schedule(out, schedule)?;
    }
    writeln!(out, "  cancel-on    {}", patterns(rule.cancel_on()))?;
    writeln!(out, "  concurrency  {}", concurrency(rule.concurrency))?;
    writeln!(
        out,
        "  cooldown     {}",
        optional_duration(rule.cooldown_ns())
    )?;
    writeln!(
        out,
        "  debounce     {}",
        optional_duration(rule.debounce_ns())
    )?;
    writeln!(out, "  for          {}", optional_duration(rule.hold_ns()))?;
    let repeat = match rule.repeat() {
        repeat if repeat.count <= 1 => "once".to_string(),
        repeat if repeat.period_ns > 0 => format!(
            "{} passes, one starting every {}",
            repeat.count,
            duration(repeat.period_ns)
        ),
        repeat => format!(
            "{} passes, every {}",
            repeat.count,
            duration(repeat.every_ns)
        ),
    };
    writeln!(out, "  repeat       {repeat}")?;
    // Only a rule that sets `trip` shows it: the others read as before.
    let breaker = rule.options.as_ref().map(|o| o.trip).unwrap_or_default();
    if breaker != Breaker::Default {
        writeln!(out, "  trip         {}", trip_text(rule.trip()))?;
    }
    // Only a keyed rule has the line, so other rules' dumps read as before.
    if let Some(per) = rule.per() {
        match decompile(per, &payload.consts, &payload.state_pairs) {
            Some(text) => writeln!(out, "  per          {text}")?,
            None => writeln!(out, "  per          (a computed key)")?,
        }
    }
    for input in rule
        .inputs()
        .iter()
        .filter_map(|&i| payload.inputs.get(i as usize))
    {
        writeln!(out, "  input        {}", input_text(input))?;
    }
    write_when(out, "  ", rule.when.as_deref(), payload)?;
    for (index, step) in rule.steps.iter().enumerate() {
        write_step(out, ("step", index), step, payload)?;
    }
    // Only a rule with finally steps shows them: the others read as before.
    for (index, step) in rule.finally().iter().enumerate() {
        write_step(out, ("finally", index), step, payload)?;
    }
    Ok(())
}

/// One rule's part of the stable text form (for `rulec diff`, which
/// compares rules key by key as `dump` shows them).
pub fn rule_text(rule: &Rule, payload: &Payload) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = write_rule(&mut text, rule, payload);
    text
}

/// The stable text form.
pub fn render_text(bundle: &Bundle) -> String {
    TextDump(bundle).to_string()
}

/// Writes the text form one rule at a time, so that a large bundle is
/// never held as one string (docs/bundle.md#rulec-dump-text).
pub fn write_text(out: &mut dyn io::Write, bundle: &Bundle) -> io::Result<()> {
    let fmt_error = |_| io::Error::other("formatting the dump failed");
    let mut chunk = String::new();
    write_header(&mut chunk, bundle).map_err(fmt_error)?;
    out.write_all(chunk.as_bytes())?;
    for rule in &bundle.payload.rules {
        chunk.clear();
        chunk.push('\n');
        write_rule(&mut chunk, rule, &bundle.payload).map_err(fmt_error)?;
        out.write_all(chunk.as_bytes())?;
    }
    Ok(())
}

/// The text form as `Display`, so every line is written with `?` and the
/// one `String` at the end comes from `to_string`.
struct TextDump<'a>(&'a Bundle);

impl fmt::Display for TextDump<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bundle(out, self.0)
    }
}

fn write_bundle(out: &mut impl Write, bundle: &Bundle) -> fmt::Result {
    write_header(out, bundle)?;
    for rule in &bundle.payload.rules {
        out.write_char('\n')?;
        write_rule(out, rule, &bundle.payload)?;
    }
    Ok(())
}

/// Everything before the first rule.
fn write_header(out: &mut impl Write, bundle: &Bundle) -> fmt::Result {
    let payload = &bundle.payload;
    writeln!(out, "bundle {}", bundle.id)?;
    writeln!(out, "format   {FORMAT_VERSION}")?;
    writeln!(out, "compiler rulec {}", payload.compiler_version)?;
    writeln!(
        out,
        "rules    {} ({} enabled)",
        payload.rules.len(),
        payload.rules.iter().filter(|r| r.enabled).count()
    )?;
    writeln!(out, "state    {}", payload.state_pairs.len())?;
    for pair in &payload.state_pairs {
        writeln!(out, "  {:?} {:?}", pair.hash, pair.field)?;
    }
    // Only a bundle with inputs says so: the view of others stays as it was.
    if !payload.inputs.is_empty() {
        writeln!(out, "inputs   {}", payload.inputs.len())?;
        for input in &payload.inputs {
            writeln!(out, "  {}", input_text(input))?;
        }
    }
    // Only a bundle built with a profile: `--profile none` dumps as before.
    if let Some(profile) = &payload.profile {
        write_profile(out, profile, payload)?;
    }
    // Only a bundle with guards or limits shows them.
    if !payload.envelope.is_empty() {
        write_envelope(out, &payload.envelope, payload)?;
    }
    Ok(())
}

/// The profile part of the text form (docs/sources.md): name and digest,
/// then each source with its emits in order, then the polls.
fn write_profile(out: &mut impl Write, profile: &Profile, payload: &Payload) -> fmt::Result {
    writeln!(out, "profile  {} {}", profile.name, profile.digest)?;
    writeln!(
        out,
        "sources  {} ({} emits)",
        profile.sources.len(),
        profile.sources.iter().map(|s| s.emits.len()).sum::<usize>()
    )?;
    for source in &profile.sources {
        let changes = match source.changes {
            Changes::Distinct => "",
            Changes::Every => " every",
        };
        match &source.origin {
            Origin::Field { hash, field, read } if read.is_empty() => {
                writeln!(out, "  hash {hash:?} {field:?}{changes}")?
            }
            Origin::Field { hash, field, read } => {
                writeln!(out, "  hash {hash:?} {field:?}{changes} read {read:?}")?
            }
            Origin::Channel { channel } => writeln!(out, "  channel {channel:?}")?,
        }
        for emit in &source.emits {
            write!(out, "    -> {}", emit.topic)?;
            for (key, patterns) in [
                ("from", &emit.from),
                ("to", &emit.to),
                ("payload", &emit.payload),
            ] {
                if !patterns.is_empty() {
                    write!(out, " {key} {}", patterns_text(patterns))?;
                }
            }
            if let Some(when) = &emit.when {
                write!(out, " when {}", program_text(when, payload))?;
            }
            if !emit.data.is_empty() {
                let data: Vec<String> = emit
                    .data
                    .iter()
                    .map(|(key, spec)| format!("{key} = {}", data_text(spec, payload)))
                    .collect();
                write!(out, " data {{ {} }}", data.join(", "))?;
            }
            out.write_char('\n')?;
        }
    }
    writeln!(out, "polls    {}", profile.polls.len())?;
    for poll in &profile.polls {
        writeln!(
            out,
            "  {:?} every {} {:?}",
            poll.hash,
            duration(poll.every_ns),
            poll.fields
        )?;
    }
    Ok(())
}

fn patterns_text(patterns: &[ValuePattern]) -> String {
    let texts: Vec<String> = patterns
        .iter()
        .map(|p| format!("{:?}", p.to_string()))
        .collect();
    format!("[{}]", texts.join(", "))
}

/// The guards and limits (docs/safety.md), after the profile.
fn write_envelope(out: &mut impl Write, envelope: &Envelope, payload: &Payload) -> fmt::Result {
    writeln!(out, "guards   {}", envelope.guards.len())?;
    for guard in &envelope.guards {
        writeln!(
            out,
            "  {:?} ({}) {}",
            guard.name,
            guard.declared_in.file(),
            guard.cover.describe()
        )?;
        writeln!(out, "    when {}", program_text(&guard.when, payload))?;
        if let Some(say) = &guard.say {
            writeln!(out, "    say  {say:?}")?;
        }
    }
    writeln!(out, "limits   {}", envelope.limits.len())?;
    for limit in &envelope.limits {
        writeln!(
            out,
            "  {:?} ({}) {}: at most {} per {}",
            limit.name,
            limit.declared_in.file(),
            limit.cover.describe(),
            limit.max,
            duration(limit.per_ns)
        )?;
    }
    Ok(())
}

/// A breaker as the dump shows it: `off`, or `100 starts per 10s, pause 60s`.
fn trip_text(trip: Option<Trip>) -> String {
    match trip {
        None => "off".to_string(),
        Some(trip) => format!(
            "{} starts per {}, pause {}",
            trip.starts,
            duration(trip.per_ns),
            duration(trip.pause_ns)
        ),
    }
}

fn envelope_json(envelope: &Envelope, payload: &Payload) -> Json {
    let guards: Vec<Json> = envelope
        .guards
        .iter()
        .map(|guard| {
            json!({
                "name": guard.name,
                "file": guard.declared_in.file(),
                "from_profile": matches!(guard.declared_in, DeclaredIn::Profile(_)),
                "covers": guard.cover.describe(),
                "when": program_text(&guard.when, payload),
                "say": guard.say,
            })
        })
        .collect();
    let limits: Vec<Json> = envelope
        .limits
        .iter()
        .map(|limit| {
            json!({
                "name": limit.name,
                "file": limit.declared_in.file(),
                "from_profile": matches!(limit.declared_in, DeclaredIn::Profile(_)),
                "covers": limit.cover.describe(),
                "max": limit.max,
                "per_ns": limit.per_ns,
            })
        })
        .collect();
    json!({ "guards": guards, "limits": limits })
}

/// A program as its source text, or its ops when it does not decompile.
fn program_text(program: &Program, payload: &Payload) -> String {
    decompile(program, &payload.consts, &payload.state_pairs).unwrap_or_else(|| {
        let ops: Vec<String> = disassemble(program, &payload.consts, &payload.state_pairs)
            .into_iter()
            .map(|line| line.trim().to_string())
            .collect();
        format!("[{}]", ops.join("; "))
    })
}

fn data_text(spec: &DataSpec, payload: &Payload) -> String {
    match spec {
        DataSpec::Str(text) => format!("{text:?}"),
        DataSpec::Int(number) => number.to_string(),
        DataSpec::Float(number) => format!("{number:?}"),
        DataSpec::Bool(value) => value.to_string(),
        DataSpec::From => "from".into(),
        DataSpec::To => "to".into(),
        DataSpec::Payload => "payload".into(),
        DataSpec::Field(field) => format!("field {field:?}"),
        DataSpec::Expr(program) => format!("expr {}", program_text(program, payload)),
    }
}

/// One `data` value as the profile file writes it: a constant, or
/// `{"value": "to"}`, `{"field": ...}`, `{"expr": ...}`.
fn data_json(spec: &DataSpec, payload: &Payload) -> Json {
    match spec {
        DataSpec::Str(text) => json!(text),
        DataSpec::Int(number) => json!(number),
        DataSpec::Float(number) => json!(number),
        DataSpec::Bool(value) => json!(value),
        DataSpec::From => json!({"value": "from"}),
        DataSpec::To => json!({"value": "to"}),
        DataSpec::Payload => json!({"value": "payload"}),
        DataSpec::Field(field) => json!({ "field": field }),
        DataSpec::Expr(program) => json!({ "expr": program_text(program, payload) }),
    }
}

fn profile_json(profile: &Profile, payload: &Payload) -> Json {
    let patterns =
        |list: &[ValuePattern]| -> Vec<String> { list.iter().map(|p| p.to_string()).collect() };
    let sources: Vec<Json> = profile
        .sources
        .iter()
        .map(|source| {
            let mut value = match &source.origin {
                Origin::Field { hash, field, read } => {
                    json!({"kind": "hash", "hash": hash, "field": field, "read": read})
                }
                Origin::Channel { channel } => json!({"kind": "channel", "channel": channel}),
            };
            value["changes"] = json!(match source.changes {
                Changes::Distinct => "distinct",
                Changes::Every => "every",
            });
            value["emits"] = source
                .emits
                .iter()
                .map(|emit| {
                    let data: serde_json::Map<String, Json> = emit
                        .data
                        .iter()
                        .map(|(key, spec)| (key.clone(), data_json(spec, payload)))
                        .collect();
                    json!({
                        "topic": emit.topic,
                        "from": patterns(&emit.from),
                        "to": patterns(&emit.to),
                        "payload": patterns(&emit.payload),
                        "when": emit.when.as_ref().map(|p| program_text(p, payload)),
                        "data": data,
                        "from_to": emit.from_to,
                    })
                })
                .collect();
            value
        })
        .collect();
    let polls: Vec<Json> = profile
        .polls
        .iter()
        .map(|poll| json!({"hash": poll.hash, "fields": poll.fields, "every_ns": poll.every_ns}))
        .collect();
    json!({
        "name": profile.name,
        "digest": profile.digest,
        "sources": sources,
        "polls": polls,
    })
}

/// One input as the text form shows it (docs/bundle.md#rulec-dump-text):
/// `hash "vehicle" ["engine-power"] -> input.engine-power`.
fn input_text(input: &Input) -> String {
    let source = match &input.source {
        InputSource::Hash { hash, fields } => format!("hash {hash:?} {fields:?}"),
        InputSource::Channel {
            channel,
            format,
            max_bytes,
        } => format!(
            "channel {channel:?} {} max-bytes {max_bytes}",
            format.as_str()
        ),
    };
    match &input.topic {
        Some(topic) => format!("{source} -> {topic}"),
        None => format!("{source} (state only)"),
    }
}

fn input_json(input: &Input) -> Json {
    let mut value = match &input.source {
        InputSource::Hash { hash, fields } => {
            json!({"kind": "hash", "hash": hash, "fields": fields})
        }
        InputSource::Channel {
            channel,
            format,
            max_bytes,
        } => json!({
            "kind": "channel", "channel": channel, "format": format.as_str(), "max_bytes": max_bytes
        }),
    };
    value["topic"] = json!(input.topic);
    value
}

fn action_json(action: &Action, payload: &Payload) -> Json {
    match action {
        Action::Redis {
            list,
            push,
            timeout_ns,
        } => {
            json!({"kind": "redis", "list": list, "push": text_json(push, payload), "timeout_ns": timeout_ns})
        }
        Action::Exec {
            command,
            timeout_ns,
        } => json!({"kind": "exec", "command": command, "timeout_ns": timeout_ns}),
        Action::Can(frame) => json!({
            "kind": "can",
            "iface": frame.iface,
            "id": frame.id,
            "extended": frame.extended,
            "rtr": frame.rtr,
            "dlc": frame.dlc,
            "data": hex(&frame.data),
        }),
        Action::Publish {
            channel,
            message,
            timeout_ns,
        } => json!({
            "kind": "publish", "channel": channel, "message": text_json(message, payload), "timeout_ns": timeout_ns
        }),
        Action::Notify(n) => json!({
            "kind": "notify",
            "id": n.id,
            "title": text_json(&n.title, payload),
            "body": text_json(&n.body, payload),
            "severity": n.severity.as_str(),
            "ttl_ms": n.ttl_ms,
            "dismiss": n.dismiss,
            "timeout_ns": n.timeout_ns,
        }),
    }
}

/// The JSON form: the same content, durations in nanoseconds.
pub fn render_json(bundle: &Bundle) -> Json {
    serde_json::to_value(JsonDump(bundle)).unwrap_or(Json::Null)
}

/// Writes the JSON form, pretty-printed, one rule at a time: a large
/// bundle is never held as one JSON tree (docs/bundle.md#rulec-dump---format-json).
pub fn write_json(out: &mut dyn io::Write, bundle: &Bundle) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, &JsonDump(bundle)).map_err(io::Error::other)?;
    writeln!(out)
}

/// The JSON form as `Serialize`: the top-level keys in sorted order, as a
/// `serde_json::Value` would print them, and each rule's object built only
/// when it is written.
struct JsonDump<'a>(&'a Bundle);

impl serde::Serialize for JsonDump<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let bundle = self.0;
        let payload = &bundle.payload;
        let state_pairs: Vec<Json> = payload
            .state_pairs
            .iter()
            .map(|p| json!({"hash": p.hash, "field": p.field}))
            .collect();
        let inputs: Vec<Json> = payload.inputs.iter().map(input_json).collect();
        let entries =
            6 + usize::from(payload.profile.is_some()) + usize::from(!payload.envelope.is_empty());
        let mut map = serializer.serialize_map(Some(entries))?;
        map.serialize_entry("compiler_version", &payload.compiler_version)?;
        // Only a bundle with guards or limits (docs/safety.md).
        if !payload.envelope.is_empty() {
            map.serialize_entry("envelope", &envelope_json(&payload.envelope, payload))?;
        }
        map.serialize_entry("format_version", &FORMAT_VERSION)?;
        map.serialize_entry("id", &bundle.id)?;
        map.serialize_entry("inputs", &inputs)?;
        // Only a bundle built with a profile: `--profile none` dumps as before.
        if let Some(profile) = &payload.profile {
            map.serialize_entry("profile", &profile_json(profile, payload))?;
        }
        map.serialize_entry("rules", &JsonRules(payload))?;
        map.serialize_entry("state_pairs", &state_pairs)?;
        map.end()
    }
}

struct JsonRules<'a>(&'a Payload);

impl serde::Serialize for JsonRules<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.rules.iter().map(|rule| rule_json(rule, self.0)))
    }
}

/// One rule's JSON object, as `rulec dump --format json` shows it.
pub fn rule_json(rule: &Rule, payload: &Payload) -> Json {
    let when = |p: Option<&Program>| match p {
        None => Json::Null,
        Some(p) => json!(disassemble(p, &payload.consts, &payload.state_pairs)
            .into_iter()
            .map(|line| line.trim_start().to_string())
            .collect::<Vec<_>>()),
    };
    let when_expr =
        |p: Option<&Program>| p.and_then(|p| decompile(p, &payload.consts, &payload.state_pairs));
    let pats = |list: &[crate::TopicPattern]| -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    };
    let step_json = |step: &Step| {
        json!({
            "action": action_json(&step.action, payload),
            "after_ns": step.after_ns,
            "durable": step.durable,
            "fingerprint": step.fingerprint.to_string(),
            "when": when(step.when.as_ref()),
            "when_expr": when_expr(step.when.as_ref()),
        })
    };
    let mut out = json!({
        "name": rule.name,
        "source": &*rule.source,
        "enabled": rule.enabled,
        "protected": rule.protected(),
        "on": pats(&rule.on),
        "cancel_on": pats(rule.cancel_on()),
        "concurrency": concurrency(rule.concurrency),
        "cooldown_ns": rule.cooldown_ns(),
        "debounce_ns": rule.debounce_ns(),
        "hold_ns": rule.hold_ns(),
        "inputs": rule.inputs(),
        "repeat": {"count": rule.repeat().count, "every_ns": rule.repeat().every_ns},
        "when": when(rule.when.as_deref()),
        "when_expr": when_expr(rule.when.as_deref()),
        "steps": rule.steps.iter().map(&step_json).collect::<Vec<_>>(),
        "finally": rule.finally().iter().map(&step_json).collect::<Vec<_>>(),
    });
    // Only a rule that sets `trip` carries it: the others read as before.
    let breaker = rule.options.as_ref().map(|o| o.trip).unwrap_or_default();
    if let (Json::Object(map), false) = (&mut out, breaker == Breaker::Default) {
        let trip = rule.trip().map(
            |trip| json!({"starts": trip.starts, "per_ns": trip.per_ns, "pause_ns": trip.pause_ns}),
        );
        map.insert("trip".into(), trip.unwrap_or(Json::Bool(false)));
    }
    // Keys only a keyed or periodic rule has, so other rules' dumps read
    // as before.
    if let Some(object) = out.as_object_mut() {
        if let Some(per) = rule.per() {
            object.insert("per".into(), when(Some(per)));
            object.insert("per_expr".into(), json!(when_expr(Some(per))));
        }
        if rule.repeat().period_ns > 0 {
            object.insert(
                "repeat".into(),
                json!({
                    "count": rule.repeat().count,
                    "period_ns": rule.repeat().period_ns,
                }),
            );
        }
    }
    // Only a scheduled rule has the key (docs/rules.md#schedules).
    if let (Some(schedule), Some(object)) = (rule.schedule(), out.as_object_mut()) {
        object.insert(
            "schedule".to_string(),
            json!({"at_s": schedule.at, "every_s": schedule.every_s}),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program joining one 64 KiB constant with itself 5,000 times would
    /// be 320 MB of text; it is cut to a note after 256 KiB.
    #[test]
    fn a_huge_expression_is_cut_to_a_note() {
        let consts = vec![Const::Str("x".repeat(64 * 1024))];
        let mut ops = vec![Op::Const(0)];
        for _ in 0..5_000 {
            ops.extend([Op::Const(0), Op::Add]);
        }
        let text = decompile(&Program { ops }, &consts, &[]).unwrap_or_default();
        assert!(
            text.starts_with("<an expression of 10001 instructions"),
            "{}",
            &text[..text.len().min(100)]
        );
        let small = Program {
            ops: vec![Op::Const(0), Op::Const(0), Op::Eq],
        };
        let small_consts = vec![Const::Int(1)];
        assert_eq!(
            decompile(&small, &small_consts, &[]).as_deref(),
            Some("1 == 1")
        );
    }
}
