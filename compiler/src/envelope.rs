//! The safety envelope's tables (docs/safety.md): `[[guard]]` and
//! `[[limit]]`, read the same way from a profile file and from a rule file,
//! checked with spans, names settled over both (two guards with one name
//! are an error: a rules directory can only add), lowered into the
//! bundle's [`rulecore::envelope::Envelope`]. The rule key `trip` is read
//! by the rule checker ([`trip`]).

use crate::diagnostic::{Code, Diagnostic};
use crate::keys::Level;
use crate::load::SourceFile;
use crate::span::StringMap;
use crate::when::{self, CheckedWhen, ConstPool, Expr, ExprKind};
use rulecore::bundle::StatePair;
use rulecore::envelope::{Breaker, Cover, DeclaredIn, Envelope, Guard, Limit, Target, Trip};
use rulecore::value_pattern::ValuePattern;
use std::collections::HashMap;
use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

type Value<'i> = Spanned<DeValue<'i>>;

/// One checked `[[guard]]`.
#[derive(Debug, Clone)]
pub struct GuardDecl {
    pub name: String,
    pub cover: Cover,
    pub when: CheckedWhen,
    pub when_text: String,
    pub say: Option<String>,
    pub file: String,
    pub from_profile: bool,
    /// The `name` value's span, for a second guard of that name.
    pub name_span: Range<usize>,
    /// The `when` value's span.
    pub when_span: Range<usize>,
}

/// One checked `[[limit]]`.
#[derive(Debug, Clone)]
pub struct LimitDecl {
    pub name: String,
    pub cover: Cover,
    pub max: u32,
    pub per_ns: u64,
    pub file: String,
    pub from_profile: bool,
    pub name_span: Range<usize>,
}

/// The guards and limits of a profile or of a rules directory, in
/// declaration order.
#[derive(Debug, Clone, Default)]
pub struct EnvelopeDecls {
    pub guards: Vec<GuardDecl>,
    pub limits: Vec<LimitDecl>,
}

impl EnvelopeDecls {
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty() && self.limits.is_empty()
    }

    /// Every `state()` pair the guards read.
    pub fn state_pairs(&self) -> impl Iterator<Item = StatePair> + '_ {
        self.guards
            .iter()
            .flat_map(|guard| guard.when.state_pairs.iter().cloned())
    }

    pub fn extend(&mut self, other: EnvelopeDecls) {
        self.guards.extend(other.guards);
        self.limits.extend(other.limits);
    }
}

/// Reads every table of an array of `[[guard]]` (`is_guard`) or
/// `[[limit]]` tables into `decls`, each problem a diagnostic.
pub fn read_tables(
    file: &SourceFile,
    items: &[Value<'_>],
    is_guard: bool,
    from_profile: bool,
    decls: &mut EnvelopeDecls,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let mut reader = Reader {
        file,
        from_profile,
        diagnostics,
    };
    let kind = if is_guard { "guard" } else { "limit" };
    for item in items {
        let DeValue::Table(table) = item.get_ref() else {
            reader.push(
                Diagnostic::error(Code::Type, format!("each `{kind}` must be a table"))
                    .at(item.span(), "expected a table")
                    .with_help(format!("start each one with a `[[{kind}]]` header")),
            );
            continue;
        };
        if is_guard {
            decls.guards.extend(reader.guard(table, item.span()));
        } else {
            decls.limits.extend(reader.limit(table, item.span()));
        }
    }
}

/// Whether a rule file's text declares a guard or a limit, read line by
/// line so that it answers for a file that does not parse: a `[[guard]]`
/// or `[[limit]]` header, or a top-level `guard = [...]`/`limit = [...]`.
/// `rulec build --partial` leaves a rejected file out, and a bundle
/// without one of its guards would be weaker than the author wrote it.
pub fn declares_any(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        let header = line
            .strip_prefix("[[")
            .map(|rest| rest.trim_start())
            .is_some_and(|rest| rest.starts_with("guard") || rest.starts_with("limit"));
        let key = ["guard", "limit"].iter().any(|key| {
            line.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        });
        header || key
    })
}

/// Two guards (or two limits) with one name are an error, wherever they
/// are declared: a rules directory cannot replace the profile's. `decls`
/// in order: the profile's, then the rules directory's.
pub fn check_names(decls: &EnvelopeDecls) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let guards = decls
        .guards
        .iter()
        .map(|g| (&g.name, &g.file, &g.name_span, g.from_profile));
    let limits = decls
        .limits
        .iter()
        .map(|l| (&l.name, &l.file, &l.name_span, l.from_profile));
    for (kind, names) in [
        ("guard", guards.collect::<Vec<_>>()),
        ("limit", limits.collect()),
    ] {
        let mut first: HashMap<&str, (&String, &Range<usize>, bool)> = HashMap::new();
        for (name, file, span, from_profile) in names {
            match first.get(name.as_str()) {
                Some((first_file, first_span, first_in_profile)) => {
                    let help = if *first_in_profile {
                        format!("the profile declares this {kind}; a rules directory can add {kind}s, never replace or weaken one: give yours another name")
                    } else {
                        format!("{kind} names are unique over the profile and every rule file; rename one of them")
                    };
                    let mut diagnostic = Diagnostic::error(
                        Code::DuplicateGuard,
                        format!("the {kind} name `{name}` is already used"),
                    )
                    .in_file(file)
                    .at(span.clone(), "second definition of this name")
                    .with_help(help);
                    diagnostic = diagnostic.with_related(
                        first_file,
                        (*first_span).clone(),
                        "first defined here",
                    );
                    out.push(diagnostic);
                }
                None => {
                    first.insert(name, (file, span, from_profile));
                }
            }
        }
    }
    out
}

/// The bundle's envelope: `decls` lowered, their programs in `pool`.
pub fn lower(decls: &EnvelopeDecls, pool: &mut ConstPool) -> Envelope {
    let declared_in = |file: &str, from_profile: bool| {
        if from_profile {
            DeclaredIn::Profile(file.to_string())
        } else {
            DeclaredIn::Rules(file.to_string())
        }
    };
    let guards = decls
        .guards
        .iter()
        .map(|guard| {
            let when = when::lower(&guard.when, pool);
            let reads = guard
                .when
                .state_pairs
                .iter()
                .map(|pair| pool.state_pair(pair))
                .collect();
            Guard {
                name: guard.name.clone(),
                declared_in: declared_in(&guard.file, guard.from_profile),
                cover: guard.cover.clone(),
                when,
                reads,
                when_text: guard.when_text.clone(),
                say: guard.say.clone(),
            }
        })
        .collect();
    let limits = decls
        .limits
        .iter()
        .map(|limit| Limit {
            name: limit.name.clone(),
            declared_in: declared_in(&limit.file, limit.from_profile),
            cover: limit.cover.clone(),
            max: limit.max,
            per_ns: limit.per_ns,
        })
        .collect();
    Envelope { guards, limits }
}

/// A rule's `trip` value: `false`, or a table of `starts`, `per` and
/// `pause` (each defaulting to the built-in breaker's). `Err` holds the
/// problems.
pub fn trip(file: &SourceFile, value: &Value<'_>) -> Result<Breaker, Vec<Diagnostic>> {
    let mut diagnostics = Vec::new();
    let mut reader = Reader {
        file,
        from_profile: false,
        diagnostics: &mut diagnostics,
    };
    let breaker = match value.get_ref() {
        DeValue::Boolean(false) => Some(Breaker::Off),
        DeValue::Boolean(true) => {
            reader.push(
                Diagnostic::error(Code::Trip, "`trip = true` says nothing: every rule has the breaker")
                    .at(value.span(), "write a table or `false`")
                    .with_help("leave `trip` out for the default (100 starts per 10s, then a 60s pause), write `trip = { starts = 20, per = \"10s\", pause = \"60s\" }`, or `trip = false` to turn it off"),
            );
            None
        }
        DeValue::Table(table) => reader.trip_table(table),
        _ => {
            reader.wrong_type("trip", value, "a table `{ starts, per, pause }` or `false`");
            None
        }
    };
    match breaker {
        Some(breaker) if diagnostics.is_empty() => Ok(breaker),
        _ => Err(diagnostics),
    }
}

struct Reader<'a> {
    file: &'a SourceFile,
    from_profile: bool,
    diagnostics: &'a mut Vec<Diagnostic>,
}

fn entry<'t, 'i>(table: &'t DeTable<'i>, key: &str) -> Option<(Range<usize>, &'t Value<'i>)> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(k, value)| (k.span(), value))
}

impl Reader<'_> {
    fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic.in_file(&self.file.name));
    }

    fn wrong_type(&mut self, key: &str, value: &Value<'_>, expected: &str) {
        self.push(crate::validate::wrong_type(key, value, expected));
    }

    /// Unknown keys are errors that reject the table.
    fn keys(&mut self, table: &DeTable<'_>, level: Level) -> bool {
        let (place, allowed) = (level.place(), &crate::keys::names(level)[..]);
        let mut good = true;
        for (key, _) in table.iter() {
            let name: &str = key.get_ref();
            if allowed.contains(&name) {
                continue;
            }
            good = false;
            self.push(crate::validate::unknown_key(
                name,
                key.span(),
                place,
                allowed,
            ));
        }
        good
    }

    fn string(&mut self, table: &DeTable<'_>, key: &str) -> Option<Option<(String, Range<usize>)>> {
        let Some((_, value)) = entry(table, key) else {
            return Some(None);
        };
        match value.get_ref() {
            DeValue::String(text) if !text.trim().is_empty() => {
                Some(Some((text.to_string(), value.span())))
            }
            DeValue::String(_) => {
                self.push(
                    Diagnostic::error(Code::EmptyValue, format!("`{key}` is empty"))
                        .at(value.span(), "write a value"),
                );
                None
            }
            _ => {
                self.wrong_type(key, value, "a string");
                None
            }
        }
    }

    fn name(
        &mut self,
        table: &DeTable<'_>,
        span: &Range<usize>,
        kind: &str,
    ) -> Option<(String, Range<usize>)> {
        match self.string(table, "name")? {
            Some(found) => Some(found),
            None => {
                self.push(
                    Diagnostic::error(
                        Code::MissingKey,
                        format!("missing `name`: every {kind} has one"),
                    )
                    .at(span.clone(), "`name` is required here")
                    .with_help(
                        "the name is what the log, the counters and `ruled ctl guards` show",
                    ),
                );
                None
            }
        }
    }

    /// `list`, `channel`, `can` or `exec` (exactly one), and `values`.
    fn cover(&mut self, table: &DeTable<'_>, span: &Range<usize>) -> Option<Cover> {
        let mut targets = Vec::new();
        if let Some((list, _)) = self.string(table, "list")? {
            targets.push(Target::List(list));
        }
        if let Some((channel, _)) = self.string(table, "channel")? {
            targets.push(Target::Channel(channel));
        }
        if let Some((_, value)) = entry(table, "can") {
            match value.get_ref() {
                DeValue::Integer(integer) => {
                    let digits = integer.as_str().replace('_', "");
                    match u32::from_str_radix(&digits, integer.radix()) {
                        Ok(id) if id <= 0x1FFF_FFFF => targets.push(Target::Can(id)),
                        _ => {
                            self.push(
                                Diagnostic::error(Code::CanId, "`can` is not a CAN frame id")
                                    .at(value.span(), "at most 0x1FFFFFFF")
                                    .with_help(
                                        "write the frame id as a TOML integer, `can = 0x4A0`",
                                    ),
                            );
                            return None;
                        }
                    }
                }
                _ => {
                    self.wrong_type("can", value, "an integer (`0x4A0`)");
                    return None;
                }
            }
        }
        if let Some((_, value)) = entry(table, "exec") {
            match value.get_ref() {
                DeValue::Boolean(true) => targets.push(Target::Exec),
                DeValue::Boolean(false) => {}
                _ => {
                    self.wrong_type("exec", value, "`true`");
                    return None;
                }
            }
        }
        let target = match targets.len() {
            1 => targets.remove(0),
            found => {
                let message = if found == 0 {
                    "it covers no action: write one of `list`, `channel`, `can` or `exec = true`"
                } else {
                    "it covers more than one kind of action: write one of `list`, `channel`, `can` or `exec = true` per table"
                };
                self.push(
                    Diagnostic::error(Code::Guard, message)
                        .at(span.clone(), "here")
                        .with_help("declare one table per list, channel or frame id"),
                );
                return None;
            }
        };
        let values = match entry(table, "values") {
            None => Vec::new(),
            Some((_, value)) => self.values(value, &target)?,
        };
        Some(Cover { target, values })
    }

    fn values(&mut self, value: &Value<'_>, target: &Target) -> Option<Vec<ValuePattern>> {
        if matches!(target, Target::Can(_) | Target::Exec) {
            self.push(
                Diagnostic::error(Code::Guard, "`values` is for a list or a channel")
                    .at(value.span(), "a `can` or `exec` action pushes no value")
                    .with_help("leave `values` out: the table covers every such action"),
            );
            return None;
        }
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type("values", value, "an array of strings");
            return None;
        };
        if items.is_empty() {
            self.push(
                Diagnostic::error(
                    Code::EmptyValue,
                    "`values` is empty: it would cover nothing",
                )
                .at(value.span(), "no value")
                .with_help("leave `values` out to cover every value"),
            );
            return None;
        }
        let mut patterns = Vec::new();
        for item in items {
            let DeValue::String(text) = item.get_ref() else {
                self.wrong_type("values", item, "a string");
                return None;
            };
            match ValuePattern::parse(text) {
                Ok(pattern) => patterns.push(pattern),
                Err(error) => {
                    self.push(
                        Diagnostic::error(
                            Code::Pattern,
                            format!("value pattern `{text}`: {error}"),
                        )
                        .at(item.span(), "not a value pattern"),
                    );
                    return None;
                }
            }
        }
        Some(patterns)
    }

    fn guard(&mut self, table: &DeTable<'_>, span: Range<usize>) -> Option<GuardDecl> {
        if !self.keys(table, Level::Guard) {
            return None;
        }
        let (name, name_span) = self.name(table, &span, "guard")?;
        let cover = self.cover(table, &span)?;
        let Some((when_text, when_span)) = self.string(table, "when")? else {
            self.push(
                Diagnostic::error(
                    Code::MissingKey,
                    "missing `when`: the condition the guard allows actions under",
                )
                .at(span, "`when` is required here")
                .with_help(
                    r#"for example `when = 'state("vehicle", "state") != "ready-to-drive"'`"#,
                ),
            );
            return None;
        };
        let when = self.guard_when(&when_text, when_span.clone())?;
        let say = self.string(table, "say")?.map(|(say, _)| say);
        Some(GuardDecl {
            name,
            cover,
            when,
            when_text,
            say,
            file: self.file.name.clone(),
            from_profile: self.from_profile,
            name_span,
            when_span,
        })
    }

    /// A guard's `when`: the `when` language over `state()` only.
    fn guard_when(&mut self, text: &str, span: Range<usize>) -> Option<CheckedWhen> {
        let map = StringMap::new(&self.file.text, span, text);
        match when::check(text) {
            Ok(checked) => {
                let mut reads = Vec::new();
                event_reads(&checked.expr, &mut reads);
                for read in &reads {
                    self.push(
                        Diagnostic::error(Code::GuardReadsEvent, "a guard's `when` reads the event")
                            .at(map.map(read.clone()), "the event is not known here")
                            .with_help("a guard is about the scooter, not the trigger: it is checked at the action, whatever event started the run; read `state(\"hash\", \"field\")` only"),
                    );
                }
                for warning in &checked.warnings {
                    let mut diagnostic = Diagnostic::warning(warning.code, warning.message.clone())
                        .at(map.map(warning.span.clone()), warning.label.clone());
                    diagnostic.help = warning.help.clone();
                    self.push(diagnostic);
                }
                reads.is_empty().then_some(checked)
            }
            Err(problems) => {
                for problem in problems {
                    let mut diagnostic = Diagnostic::error(problem.code, problem.message)
                        .at(map.map(problem.span), problem.label);
                    diagnostic.help = problem.help;
                    self.push(diagnostic);
                }
                None
            }
        }
    }

    fn limit(&mut self, table: &DeTable<'_>, span: Range<usize>) -> Option<LimitDecl> {
        if !self.keys(table, Level::Limit) {
            return None;
        }
        let (name, name_span) = self.name(table, &span, "limit")?;
        let cover = self.cover(table, &span)?;
        let max = match entry(table, "max") {
            Some((_, value)) => self.count("max", value)?,
            None => {
                self.push(
                    Diagnostic::error(
                        Code::MissingKey,
                        "missing `max`: how many actions a window allows",
                    )
                    .at(span, "`max` is required here"),
                );
                return None;
            }
        };
        let per_ns = match entry(table, "per") {
            Some((_, value)) => self.duration("per", value)?,
            None => {
                self.push(
                    Diagnostic::error(Code::MissingKey, "missing `per`: the window's length")
                        .at(span, "`per` is required here")
                        .with_help(r#"for example `per = "60s"`"#),
                );
                return None;
            }
        };
        Some(LimitDecl {
            name,
            cover,
            max,
            per_ns,
            file: self.file.name.clone(),
            from_profile: self.from_profile,
            name_span,
        })
    }

    fn trip_table(&mut self, table: &DeTable<'_>) -> Option<Breaker> {
        if !self.keys(table, Level::Trip) {
            return None;
        }
        let mut trip = Trip::DEFAULT;
        if let Some((_, value)) = entry(table, "starts") {
            trip.starts = self.count("starts", value)?;
        }
        if let Some((_, value)) = entry(table, "per") {
            trip.per_ns = self.duration("per", value)?;
        }
        if let Some((_, value)) = entry(table, "pause") {
            trip.pause_ns = self.duration("pause", value)?;
        }
        Some(Breaker::Set(trip))
    }

    /// An integer from 1 to 1,000,000.
    fn count(&mut self, key: &str, value: &Value<'_>) -> Option<u32> {
        const MOST: u32 = 1_000_000;
        let DeValue::Integer(integer) = value.get_ref() else {
            self.wrong_type(key, value, "an integer");
            return None;
        };
        let digits = integer.as_str().replace('_', "");
        match u32::from_str_radix(&digits, integer.radix()) {
            Ok(count) if (1..=MOST).contains(&count) => Some(count),
            _ => {
                self.push(
                    Diagnostic::error(Code::Type, format!("`{key}` must be from 1 to {MOST}"))
                        .at(value.span(), "out of range"),
                );
                None
            }
        }
    }

    /// A positive duration of at most a day.
    fn duration(&mut self, key: &str, value: &Value<'_>) -> Option<u64> {
        const DAY_NS: u64 = 86_400_000_000_000;
        let DeValue::String(text) = value.get_ref() else {
            self.wrong_type(key, value, r#"a duration string ("10s")"#);
            return None;
        };
        match rulecore::parse_duration(text) {
            Ok(ns) if ns > 0 && ns.unsigned_abs() <= DAY_NS => Some(ns.unsigned_abs()),
            Ok(_) => {
                self.push(
                    Diagnostic::error(
                        Code::DurationRange,
                        format!("`{key}` must be more than 0 and at most 24h"),
                    )
                    .at(value.span(), "out of range"),
                );
                None
            }
            Err(error) => {
                self.push(
                    Diagnostic::error(Code::Duration, format!("`{key}`: {error}"))
                        .at(value.span(), "not a duration")
                        .with_help(r#"write a Go duration such as "500ms", "10s" or "1m""#),
                );
                None
            }
        }
    }
}

/// The spans of every event read (`topic`, `src`, `from`, `to`, `data.*`).
fn event_reads(expr: &Expr, out: &mut Vec<Range<usize>>) {
    match &expr.kind {
        ExprKind::Field(_) | ExprKind::Data(_) => out.push(expr.span.clone()),
        ExprKind::Unary(_, inner) => event_reads(inner, out),
        ExprKind::Binary(_, left, right) => {
            event_reads(left, out);
            event_reads(right, out);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|arg| event_reads(arg, out)),
        ExprKind::Lit(_) | ExprKind::State(_) => {}
    }
}

#[cfg(test)]
mod tests;
