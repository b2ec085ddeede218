//! Reading and checking a profile's tables (docs/sources.md): `profile.toml`'s
//! keys, `[[hash]]`, `[[source]]` with its `[[source.emit]]`, `[[list]]`,
//! and the envelope's `[[guard]]` and `[[limit]]` (read by `crate::envelope`),
//! with a span on every problem. Hashes are read first, from every file,
//! so that a source may name a hash declared in a later file.

use crate::diagnostic::{Code, Diagnostic};
use crate::load::SourceFile;
use crate::span::StringMap;
use crate::when::{self, CheckedWhen, Expr, ExprKind, WhenProblem};
use rulecore::bundle::StatePair;
use rulecore::bytecode::EventField;
use rulecore::profile::{Changes, DataSpec, Origin, MIN_POLL_NS};
use rulecore::suggest::did_you_mean;
use rulecore::value_pattern::{any_matches, ValuePattern};
use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

type Value<'i> = Spanned<DeValue<'i>>;

/// Everything a profile declares, checked, in declaration order.
#[derive(Debug, Clone, Default)]
pub struct Decls {
    pub hashes: Vec<HashDecl>,
    pub sources: Vec<SourceDecl>,
    pub lists: Vec<ListDecl>,
    /// `[[guard]]` and `[[limit]]` (docs/safety.md).
    pub envelope: crate::envelope::EnvelopeDecls,
}

impl Decls {
    /// Every `state()` pair of every expression, in declaration order.
    pub fn state_pairs(&self) -> impl Iterator<Item = StatePair> + '_ {
        self.sources
            .iter()
            .flat_map(|source| &source.emits)
            .flat_map(|emit| {
                emit.when
                    .iter()
                    .chain(emit.data.iter().filter_map(|(_, data)| match data {
                        DataDecl::Expr(checked) => Some(checked),
                        _ => None,
                    }))
            })
            .flat_map(|checked| checked.state_pairs.iter().cloned())
            .chain(self.envelope.state_pairs())
    }

    pub fn hash(&self, name: &str) -> Option<&HashDecl> {
        self.hashes.iter().find(|hash| hash.name == name)
    }
}

/// One `[[hash]]`.
#[derive(Debug, Clone)]
pub struct HashDecl {
    pub name: String,
    /// In the file's order.
    pub fields: Vec<(String, Vec<ValuePattern>)>,
    pub silent: Vec<String>,
    pub polled: Vec<String>,
    pub poll_ns: Option<u64>,
    pub file: String,
    pub span: Range<usize>,
}

impl HashDecl {
    fn field_names(&self) -> Vec<&str> {
        self.fields.iter().map(|(f, _)| f.as_str()).collect()
    }

    pub fn field(&self, name: &str) -> Option<&[ValuePattern]> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, values)| values.as_slice())
    }
}

/// One `[[source]]`.
#[derive(Debug, Clone)]
pub struct SourceDecl {
    pub origin: Origin,
    pub changes: Changes,
    pub emits: Vec<EmitDecl>,
    pub file: String,
    pub span: Range<usize>,
}

/// One `[[source.emit]]`.
#[derive(Debug, Clone)]
pub struct EmitDecl {
    pub topic: String,
    pub from: Vec<ValuePattern>,
    pub to: Vec<ValuePattern>,
    pub payload: Vec<ValuePattern>,
    pub when: Option<CheckedWhen>,
    /// The `when` as written, for the generated docs.
    pub when_text: Option<String>,
    /// In key order.
    pub data: Vec<(String, DataDecl)>,
    /// The `topic` value.
    pub span: Range<usize>,
}

/// Where one `data` value comes from, checked.
#[derive(Debug, Clone)]
pub enum DataDecl {
    /// A constant: `Str`, `Int`, `Float` or `Bool`.
    Const(DataSpec),
    From,
    To,
    Payload,
    Field(String),
    Expr(CheckedWhen),
}

/// One `[[list]]`.
#[derive(Debug, Clone)]
pub struct ListDecl {
    pub key: String,
    pub values: Vec<ValuePattern>,
    /// `effects`: for a value of `values`, the topics the service that
    /// takes the list makes when it performs that value, in file order
    /// (docs/safety-checks.md#effects).
    pub effects: Vec<(ValuePattern, Vec<String>)>,
    pub file: String,
    pub span: Range<usize>,
}

/// What [`parse`] found.
#[derive(Debug, Default)]
pub struct Parsed {
    pub name: Option<String>,
    pub description: Option<String>,
    pub decls: Decls,
    pub diagnostics: Vec<Diagnostic>,
}

const TOP_KEYS: &[&str] = &[
    "name",
    "extends",
    "description",
    "hash",
    "source",
    "list",
    "guard",
    "limit",
];
const TABLE_KEYS: &[&str] = &["hash", "source", "list", "guard", "limit"];
const HASH_KEYS: &[&str] = &["name", "fields", "silent", "poll", "polled"];
const SOURCE_KEYS: &[&str] = &["hash", "field", "channel", "read", "changes", "emit"];
const EMIT_KEYS: &[&str] = &["topic", "from", "to", "payload", "when", "data"];
const DATA_KEYS: &[&str] = &["value", "field", "expr"];
const LIST_KEYS: &[&str] = &["key", "values", "effects"];

/// Parses and checks `files`, of which those from `own_from` on are the
/// profile's own (the earlier ones the built-in it extends). `dir` names
/// the directory in a diagnostic about it (no `profile.toml`).
pub fn parse(files: &[SourceFile], own_from: usize, dir: Option<&str>) -> Parsed {
    let mut ctx = Ctx {
        diagnostics: Vec::new(),
    };
    let mut parsed = Parsed::default();
    let documents = read_documents(&mut ctx, files);
    let tables = ctx.top_level(files, &documents, own_from, &mut parsed);
    if !files.iter().skip(own_from).any(is_profile_toml) {
        ctx.push(no_profile_toml(dir));
    }
    let empty = Vec::new();
    ctx.hashes(tables.get("hash").unwrap_or(&empty), &mut parsed.decls);
    ctx.sources(tables.get("source").unwrap_or(&empty), &mut parsed.decls);
    ctx.lists(tables.get("list").unwrap_or(&empty), &mut parsed.decls);
    for (kind, is_guard) in [("guard", true), ("limit", false)] {
        for (file, item) in tables.get(kind).unwrap_or(&empty) {
            crate::envelope::read_tables(
                file,
                std::slice::from_ref(*item),
                is_guard,
                true,
                &mut parsed.decls.envelope,
                &mut ctx.diagnostics,
            );
        }
    }
    parsed.diagnostics = ctx.diagnostics;
    parsed
}

/// The `[[hash]]`, `[[source]]` and `[[list]]` tables of every file, by
/// kind, each with its file.
type Tables<'a, 'i> = HashMap<&'static str, Vec<(&'a SourceFile, &'a Value<'i>)>>;

/// Where each name (or topic) was first declared, to point a second
/// declaration of it at.
struct FirstSeen<K> {
    /// "declared" or "emitted", for the labels.
    verb: &'static str,
    seen: HashMap<K, (String, Range<usize>)>,
}

impl<K: Eq + Hash> FirstSeen<K> {
    fn new(verb: &'static str) -> Self {
        FirstSeen {
            verb,
            seen: HashMap::new(),
        }
    }

    /// Records `key` as first declared at `file` and `span`; when it was
    /// declared before, reports this declaration instead and returns false.
    fn is_first(
        &mut self,
        ctx: &mut Ctx,
        key: K,
        file: &str,
        span: &Range<usize>,
        message: String,
        help: &str,
    ) -> bool {
        let verb = self.verb;
        if let Some((file0, span0)) = self.seen.get(&key) {
            ctx.push(
                Diagnostic::error(Code::ProfileDuplicate, message)
                    .in_file(file)
                    .at(span.clone(), format!("{verb} again here"))
                    .with_related(file0, span0.clone(), format!("first {verb} here"))
                    .with_help(help),
            );
            return false;
        }
        self.seen.insert(key, (file.to_string(), span.clone()));
        true
    }
}

/// Each file's TOML, or `None` (reported) where it does not parse.
fn read_documents<'i>(ctx: &mut Ctx, files: &'i [SourceFile]) -> Vec<Option<DeTable<'i>>> {
    files
        .iter()
        .map(|file| match DeTable::parse(&file.text) {
            Ok(document) => Some(document.into_inner()),
            Err(error) => {
                ctx.push(syntax_error(file, &error));
                None
            }
        })
        .collect()
}

fn is_profile_toml(file: &SourceFile) -> bool {
    file.name.rsplit('/').next() == Some("profile.toml")
}

/// Without a `profile.toml` of its own, nothing names the profile.
fn no_profile_toml(dir: Option<&str>) -> Diagnostic {
    let mut diagnostic = Diagnostic::error(
        Code::Profile,
        "the profile has no `profile.toml`: nothing names it",
    )
    .with_help(
        "a profile is a directory of `*.toml` files, one of them `profile.toml` \
                     with `name = \"my-profile\"`",
    );
    diagnostic.file = dir.map(str::to_string);
    diagnostic
}

/// `help`, led by "did you mean `x`?" when `word` is close to one of
/// `names`.
fn suggesting(help: String, word: &str, names: &[&str]) -> String {
    match did_you_mean(word, names) {
        Some(close) => format!("did you mean `{close}`? {help}"),
        None => help,
    }
}

/// `name`, `extends` and `description` of the profile's own `profile.toml`.
fn profile_keys(ctx: &mut Ctx, file: &SourceFile, document: &DeTable<'_>, parsed: &mut Parsed) {
    match entry(document, "name") {
        None => ctx.push(
            Diagnostic::error(Code::MissingKey, "`profile.toml` has no `name`")
                .in_file(&file.name)
                .at(0..0, "`name` is required")
                .with_help("write `name = \"my-profile\"` (letters, digits, `-`, `_`)"),
        ),
        Some((_, value)) => {
            if let Some((name, span)) = ctx.string(file, "name", value) {
                let good = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                if !good {
                    ctx.push(
                        Diagnostic::error(Code::Profile, format!("profile name `{name}` is not allowed"))
                            .in_file(&file.name)
                            .at(span, "letters, digits, `-` and `_` only")
                            .with_help("name the profile with letters, digits, `-` and `_`, e.g. `my-accessory`"),
                    );
                }
                parsed.name = Some(name);
            }
        }
    }
    if let Some((_, value)) = entry(document, "extends") {
        if let Some((extends, span)) = ctx.string(file, "extends", value) {
            if extends != super::builtin::NAME {
                let mut help = format!(
                    "a profile can extend only the built-in profile: `extends = \"{}\"`",
                    super::builtin::NAME
                );
                if did_you_mean(&extends, &[super::builtin::NAME]).is_some() {
                    help = format!("did you mean `{}`? {help}", super::builtin::NAME);
                }
                ctx.push(
                    Diagnostic::error(
                        Code::Profile,
                        format!("unknown profile `{extends}` to extend"),
                    )
                    .in_file(&file.name)
                    .at(span, "not a built-in profile")
                    .with_help(help),
                );
            }
        }
    }
    if let Some((_, value)) = entry(document, "description") {
        parsed.description = ctx.string(file, "description", value).map(|(text, _)| text);
    }
}

fn entry<'t, 'i>(table: &'t DeTable<'i>, key: &str) -> Option<(Range<usize>, &'t Value<'i>)> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(k, value)| (k.span(), value))
}

/// Why `topic` cannot be an emitted topic, if it cannot.
fn topic_problem(topic: &str) -> Option<&'static str> {
    if topic.is_empty() {
        Some("it is empty")
    } else if topic.contains('*') {
        Some("an emitted topic is plain: no `*`")
    } else if topic.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it holds white space or a control character")
    } else if topic.starts_with("ev:") {
        Some("`ev:` is the channel prefix, not part of the topic")
    } else if topic.starts_with("input.") {
        Some("`input.*` topics belong to rules' inputs")
    } else if topic.split('.').any(str::is_empty) {
        Some("it has an empty word (`a..b`, a leading or trailing `.`)")
    } else {
        None
    }
}

struct Ctx {
    diagnostics: Vec<Diagnostic>,
}

impl Ctx {
    fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    fn error(
        &mut self,
        file: &SourceFile,
        code: Code,
        message: String,
        span: Range<usize>,
        label: &str,
        help: &str,
    ) {
        self.push(
            Diagnostic::error(code, message)
                .in_file(&file.name)
                .at(span, label)
                .with_help(help),
        );
    }

    fn unknown_key(
        &mut self,
        file: &SourceFile,
        name: &str,
        span: Range<usize>,
        place: &str,
        allowed: &[&str],
    ) {
        self.push(crate::validate::unknown_key(name, span, place, allowed).in_file(&file.name));
    }

    /// Reports the keys of `table` not in `allowed`.
    fn keys(&mut self, file: &SourceFile, table: &DeTable<'_>, place: &str, allowed: &[&str]) {
        for (key, _) in table.iter() {
            if !allowed.contains(&key.get_ref().as_ref()) {
                self.unknown_key(file, key.get_ref(), key.span(), place, allowed);
            }
        }
    }

    fn wrong_type(&mut self, file: &SourceFile, key: &str, value: &Value<'_>, expected: &str) {
        self.push(crate::validate::wrong_type(key, value, expected).in_file(&file.name));
    }

    fn missing(&mut self, file: &SourceFile, key: &str, span: Range<usize>, what: &str) {
        self.push(
            Diagnostic::error(Code::MissingKey, format!("missing `{key}`: {what}"))
                .in_file(&file.name)
                .at(span, format!("`{key}` is required here")),
        );
    }

    fn string(
        &mut self,
        file: &SourceFile,
        key: &str,
        value: &Value<'_>,
    ) -> Option<(String, Range<usize>)> {
        match value.get_ref() {
            DeValue::String(text) => Some((text.to_string(), value.span())),
            _ => {
                self.wrong_type(file, key, value, "a string");
                None
            }
        }
    }

    /// An array of strings (each with its span).
    fn strings(
        &mut self,
        file: &SourceFile,
        key: &str,
        value: &Value<'_>,
    ) -> Option<Vec<(String, Range<usize>)>> {
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(file, key, value, "an array of strings");
            return None;
        };
        let mut out = Vec::new();
        let mut good = true;
        for item in items {
            match self.string(file, key, item) {
                Some(text) => out.push(text),
                None => good = false,
            }
        }
        good.then_some(out)
    }

    /// One pattern or an array of them (`one` allows a bare string).
    fn patterns(
        &mut self,
        file: &SourceFile,
        key: &str,
        value: &Value<'_>,
        one: bool,
    ) -> Option<Vec<(ValuePattern, Range<usize>)>> {
        let texts = match value.get_ref() {
            DeValue::String(text) if one => vec![(text.to_string(), value.span())],
            DeValue::Array(_) => self.strings(file, key, value)?,
            _ => {
                let expected = if one {
                    "a value pattern or an array of them"
                } else {
                    "an array of value patterns"
                };
                self.wrong_type(file, key, value, expected);
                return None;
            }
        };
        let mut out = Vec::new();
        let mut good = true;
        for (text, span) in texts {
            match ValuePattern::parse(&text) {
                Ok(pattern) => out.push((pattern, span)),
                Err(error) => {
                    good = false;
                    self.error(
                        file,
                        Code::ValuePattern,
                        format!("`{text}` is not a value pattern: {error}"),
                        span,
                        "not a value pattern",
                        "a pattern is literal text with `<int>` or `<text>` for a part \
                         (`start:<int>`), and `<<` for a literal `<`",
                    );
                }
            }
        }
        good.then_some(out)
    }

    fn name(
        &mut self,
        file: &SourceFile,
        code: Code,
        what: &str,
        name: &str,
        span: Range<usize>,
    ) -> bool {
        // The same names as an input's (docs/rules.md#inputs).
        match rulecore::limits::input_name_problem(name) {
            Some(why) => {
                self.error(
                    file,
                    code,
                    format!("{what} `{name}` is not allowed: it {why}"),
                    span,
                    why,
                    "write the exact name the services use",
                );
                false
            }
            None => true,
        }
    }

    /// The top level of every file: the profile's own `profile.toml` keys,
    /// the tables by kind, and a report of every key that belongs nowhere.
    fn top_level<'a, 'i>(
        &mut self,
        files: &'a [SourceFile],
        documents: &'a [Option<DeTable<'i>>],
        own_from: usize,
        parsed: &mut Parsed,
    ) -> Tables<'a, 'i> {
        let mut tables: Tables<'a, 'i> = HashMap::new();
        for (index, (file, document)) in files.iter().zip(documents).enumerate() {
            let Some(document) = document else { continue };
            let is_profile_toml = is_profile_toml(file);
            let own = index >= own_from;
            if is_profile_toml && own {
                profile_keys(self, file, document, parsed);
            }
            for (key, value) in document.iter() {
                let name = key.get_ref().as_ref();
                if TABLE_KEYS.contains(&name) {
                    self.table_array(file, name, value, &mut tables);
                } else if !(is_profile_toml && TOP_KEYS.contains(&name)) {
                    let allowed: &[&str] = if is_profile_toml {
                        TOP_KEYS
                    } else {
                        TABLE_KEYS
                    };
                    let place = if is_profile_toml {
                        "in profile.toml"
                    } else {
                        "at the top of a profile file (`name`, `extends` and `description` belong in profile.toml)"
                    };
                    self.unknown_key(file, key.get_ref(), key.span(), place, allowed);
                }
            }
        }
        tables
    }

    /// Files the items of a top-level `hash`, `source` or `list` array
    /// under their kind.
    fn table_array<'a, 'i>(
        &mut self,
        file: &'a SourceFile,
        name: &str,
        value: &'a Value<'i>,
        tables: &mut Tables<'a, 'i>,
    ) {
        let DeValue::Array(items) = value.get_ref() else {
            self.push(
                Diagnostic::error(Code::Type, format!("`{name}` must be an array of tables"))
                    .in_file(&file.name)
                    .at(value.span(), format!("expected `[[{name}]]` tables"))
                    .with_help(format!("start each with a `[[{name}]]` header")),
            );
            return;
        };
        let kind: &'static str = match name {
            "hash" => "hash",
            "source" => "source",
            "guard" => "guard",
            "limit" => "limit",
            _ => "list",
        };
        let kind = tables.entry(kind).or_default();
        for item in items {
            kind.push((file, item));
        }
    }

    /// Every `[[hash]]` in order; one whose name is already declared is
    /// reported and dropped.
    fn hashes(&mut self, items: &[(&SourceFile, &Value<'_>)], decls: &mut Decls) {
        let mut first = FirstSeen::new("declared");
        for (file, item) in items {
            let Some(hash) = self.hash(file, item) else {
                continue;
            };
            if first.is_first(
                self,
                hash.name.clone(),
                &hash.file,
                &hash.span,
                format!("hash `{}` is declared twice", hash.name),
                "declare each hash once, with all its fields",
            ) {
                decls.hashes.push(hash);
            }
        }
    }

    /// Every `[[source]]` in order, against the hashes in `decls`.
    fn sources(&mut self, items: &[(&SourceFile, &Value<'_>)], decls: &mut Decls) {
        let mut first = FirstSeen::new("emitted");
        for (file, item) in items {
            let Some(source) = self.source(file, item, decls) else {
                continue;
            };
            self.topics_once(&source, &mut first);
            decls.sources.push(source);
        }
    }

    /// Reports an emit whose topic an earlier source on the same hash
    /// field or channel already emits (a source repeating its own topic
    /// is left alone).
    fn topics_once(&mut self, source: &SourceDecl, first: &mut FirstSeen<(String, String)>) {
        let origin = match &source.origin {
            Origin::Field { hash, field, .. } => format!("field `{field}` of hash `{hash}`"),
            Origin::Channel { channel } => format!("channel `{channel}`"),
        };
        let mut seen_here: Vec<&str> = Vec::new();
        for emit in &source.emits {
            if seen_here.contains(&emit.topic.as_str()) {
                continue;
            }
            seen_here.push(&emit.topic);
            first.is_first(
                self,
                (origin.clone(), emit.topic.clone()),
                &source.file,
                &emit.span,
                format!("two sources on the {origin} emit `{}`", emit.topic),
                "put both emits in one `[[source]]`, or give one another topic",
            );
        }
    }

    /// Every `[[list]]` in order; one whose key is already declared is
    /// reported and dropped.
    fn lists(&mut self, items: &[(&SourceFile, &Value<'_>)], decls: &mut Decls) {
        let mut first = FirstSeen::new("declared");
        // The topics the sources emit: what an effect may name.
        let mut emitted: Vec<String> = decls
            .sources
            .iter()
            .flat_map(|source| &source.emits)
            .map(|emit| emit.topic.clone())
            .collect();
        emitted.sort();
        emitted.dedup();
        let topics: Vec<&str> = emitted.iter().map(String::as_str).collect();
        for (file, item) in items {
            let Some(list) = self.list(file, item, &topics) else {
                continue;
            };
            if first.is_first(
                self,
                list.key.clone(),
                &list.file,
                &list.span,
                format!("list `{}` is declared twice", list.key),
                "declare each list once, with all its values",
            ) {
                decls.lists.push(list);
            }
        }
    }

    /// The string at `key`, which `table` must have: `what` says what it is.
    fn required_string(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        key: &str,
        span: &Range<usize>,
        what: &str,
    ) -> Option<(String, Range<usize>)> {
        match entry(table, key) {
            None => {
                self.missing(file, key, span.clone(), what);
                None
            }
            Some((_, value)) => self.string(file, key, value),
        }
    }

    fn hash(&mut self, file: &SourceFile, item: &Value<'_>) -> Option<HashDecl> {
        let span = item.span();
        let DeValue::Table(table) = item.get_ref() else {
            self.wrong_type(file, "hash", item, "a table");
            return None;
        };
        self.keys(file, table, "in a `[[hash]]`", HASH_KEYS);
        let mut good = true;
        let (name, name_span) =
            self.required_string(file, table, "name", &span, "the hash's key")?;
        good &= self.hash_name(file, &name, name_span);
        let fields = self.hash_fields(file, table, &span, &mut good);
        let field_names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
        let silent = self
            .named_fields(file, table, "silent", &name, &field_names)
            .map(|(f, _)| f)
            .unwrap_or_default();
        let polled = self.named_fields(file, table, "polled", &name, &field_names);
        let poll = self.poll(file, table, &mut good);
        let polled = self.polled(file, table, &name, poll.as_ref(), polled, &mut good);
        good.then(|| HashDecl {
            name,
            fields,
            silent,
            polled,
            poll_ns: poll.map(|(ns, _)| ns),
            file: file.name.clone(),
            span,
        })
    }

    /// A hash's name: a valid name, and not under `ev:`.
    fn hash_name(&mut self, file: &SourceFile, name: &str, span: Range<usize>) -> bool {
        let mut good = true;
        if let Some(rest) = name.strip_prefix("ev:") {
            self.error(
                file,
                Code::ProfileHash,
                format!("hash `{name}` is named like an event channel"),
                span.clone(),
                "under `ev:`",
                &format!("`ev:{rest}` carries the bus's events; a hash's notifications come on its own name"),
            );
            good = false;
        }
        good & self.name(file, Code::ProfileHash, "hash name", name, span)
    }

    /// `[hash.fields]`, in the file's order. A field with a bad name is
    /// kept (`good` says so), so that `silent` and `polled` can name it.
    fn hash_fields(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        span: &Range<usize>,
        good: &mut bool,
    ) -> Vec<(String, Vec<ValuePattern>)> {
        let mut fields = Vec::new();
        match entry(table, "fields") {
            None => {
                self.missing(
                    file,
                    "fields",
                    span.clone(),
                    "the hash's fields and their values",
                );
                *good = false;
            }
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(inner) => {
                    for (key, values) in inner.iter() {
                        let field = key.get_ref().to_string();
                        *good &=
                            self.name(file, Code::ProfileHash, "field name", &field, key.span());
                        match self.patterns(file, &field, values, false) {
                            Some(patterns) => {
                                fields.push((field, patterns.into_iter().map(|(p, _)| p).collect()))
                            }
                            None => *good = false,
                        }
                    }
                }
                _ => {
                    self.wrong_type(file, "fields", value, "a table of field = [values]");
                    *good = false;
                }
            },
        }
        fields
    }

    /// `silent` or `polled` (`key`): fields of hash `name`, each reported
    /// unless one of `field_names`; the known ones, with the key's span.
    fn named_fields(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        key: &str,
        name: &str,
        field_names: &[&str],
    ) -> Option<(Vec<String>, Range<usize>)> {
        let (key_span, value) = entry(table, key)?;
        let names = self.strings(file, key, value)?;
        let mut out = Vec::new();
        for (field, span) in names {
            if field_names.contains(&field.as_str()) {
                out.push(field);
                continue;
            }
            let help = suggesting(
                format!("`{key}` names fields of `[hash.fields]`"),
                &field,
                field_names,
            );
            self.error(
                file,
                Code::ProfileHash,
                format!("`{key}` names field `{field}`, which hash `{name}` does not declare"),
                span,
                "not a field of this hash",
                &help,
            );
        }
        Some((out, key_span))
    }

    /// `poll`: the interval in nanoseconds (at least [`MIN_POLL_NS`]) and
    /// its span; `None` when there is none or it is wrong.
    fn poll(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        good: &mut bool,
    ) -> Option<(u64, Range<usize>)> {
        let (_, value) = entry(table, "poll")?;
        let Some((text, span)) = self.string(file, "poll", value) else {
            *good = false;
            return None;
        };
        match rulecore::parse_duration(&text) {
            Ok(ns) if u64::try_from(ns).is_ok_and(|ns| ns >= MIN_POLL_NS) => {
                u64::try_from(ns).ok().map(|ns| (ns, span))
            }
            Ok(_) => {
                self.error(
                    file,
                    Code::ProfilePoll,
                    format!("poll interval `{text}` is below the shortest, 100ms"),
                    span,
                    "under 100ms",
                    "poll at least every `100ms`; most fields need `1s` or more",
                );
                *good = false;
                None
            }
            Err(error) => {
                self.error(
                    file,
                    Code::Duration,
                    format!("invalid duration `{text}` for `poll`: {error}"),
                    span,
                    "not a duration",
                    "durations use Go syntax: `500ms`, `1s`, `5s`",
                );
                *good = false;
                None
            }
        }
    }

    /// The fields a poll reads: a `poll` needs `polled` fields, and
    /// `polled` fields need a `poll`.
    fn polled(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        name: &str,
        poll: Option<&(u64, Range<usize>)>,
        polled: Option<(Vec<String>, Range<usize>)>,
        good: &mut bool,
    ) -> Vec<String> {
        match (poll, polled) {
            (Some(_), Some((fields, _))) if !fields.is_empty() => fields,
            (Some((_, span)), _) => {
                self.error(
                    file,
                    Code::ProfilePoll,
                    format!("hash `{name}` has a `poll` but no `polled` fields"),
                    span.clone(),
                    "polls nothing",
                    "list the fields the poll reads: `polled = [\"speed\"]`",
                );
                *good = false;
                Vec::new()
            }
            (None, Some((_, key_span))) if entry(table, "poll").is_none() => {
                self.error(
                    file,
                    Code::ProfilePoll,
                    format!("hash `{name}` has `polled` fields but no `poll` interval"),
                    key_span,
                    "no interval",
                    "add `poll = \"1s\"` (at least `100ms`)",
                );
                *good = false;
                Vec::new()
            }
            (None, _) => Vec::new(),
        }
    }

    fn list(&mut self, file: &SourceFile, item: &Value<'_>, topics: &[&str]) -> Option<ListDecl> {
        let span = item.span();
        let DeValue::Table(table) = item.get_ref() else {
            self.wrong_type(file, "list", item, "a table");
            return None;
        };
        self.keys(file, table, "in a `[[list]]`", LIST_KEYS);
        let key = match entry(table, "key") {
            None => {
                self.missing(file, "key", span.clone(), "the list's key");
                None
            }
            Some((_, value)) => self.string(file, "key", value),
        };
        let values = match entry(table, "values") {
            None => {
                self.missing(
                    file,
                    "values",
                    span.clone(),
                    "the values the list accepts (`[]`: any)",
                );
                None
            }
            Some((_, value)) => self.patterns(file, "values", value, false),
        };
        let (key, key_span) = key?;
        if !self.name(file, Code::ProfileList, "list key", &key, key_span) {
            return None;
        }
        let values: Vec<ValuePattern> = values?.into_iter().map(|(p, _)| p).collect();
        let effects = match entry(table, "effects") {
            None => Vec::new(),
            Some((_, value)) => self.effects(file, value, &values, topics)?,
        };
        Some(ListDecl {
            key,
            values,
            effects,
            file: file.name.clone(),
            span,
        })
    }

    /// A list's `effects`: a table from one of its `values` (written as in
    /// `values`) to the topics performing it makes, each a topic some
    /// source emits. `None` after a problem, which is reported.
    fn effects(
        &mut self,
        file: &SourceFile,
        value: &Value<'_>,
        values: &[ValuePattern],
        topics: &[&str],
    ) -> Option<Vec<(ValuePattern, Vec<String>)>> {
        let DeValue::Table(table) = value.get_ref() else {
            self.wrong_type(
                file,
                "effects",
                value,
                "a table from a list value to topics",
            );
            return None;
        };
        let mut out = Vec::new();
        let mut good = true;
        for (key, topics_value) in table.iter() {
            let text = key.get_ref().as_ref();
            let Some(pattern) = ValuePattern::parse(text)
                .ok()
                .filter(|pattern| values.contains(pattern))
            else {
                let written: Vec<String> = values.iter().map(ToString::to_string).collect();
                let written: Vec<&str> = written.iter().map(String::as_str).collect();
                let near = did_you_mean(text, &written).map(str::to_string);
                good = false;
                self.push(
                    Diagnostic::error(
                        Code::ProfileEffect,
                        format!(
                            "`effects` names `{text}`, which is not one of the list's `values`"
                        ),
                    )
                    .in_file(&file.name)
                    .at(key.span(), "not a value of this list")
                    .with_help(match near {
                        Some(near) => {
                            format!("did you mean `{near}`? Write the value as `values` writes it")
                        }
                        None => "write the value as `values` writes it (`hibernate-for:<int>`)"
                            .to_string(),
                    }),
                );
                continue;
            };
            let Some(named) = self.strings(file, "effects", topics_value) else {
                good = false;
                continue;
            };
            let mut made = Vec::new();
            for (topic, topic_span) in named {
                if topics.contains(&topic.as_str()) {
                    made.push(topic);
                    continue;
                }
                good = false;
                let near = did_you_mean(&topic, topics);
                self.push(
                    Diagnostic::error(
                        Code::ProfileEffect,
                        format!("effect `{topic}` is a topic no source of the profile emits"),
                    )
                    .in_file(&file.name)
                    .at(topic_span, "no source emits this topic")
                    .with_help(match near {
                        Some(near) => format!("did you mean `{near}`?"),
                        None => "an effect is a topic a `[[source.emit]]` of the profile makes"
                            .to_string(),
                    }),
                );
            }
            out.push((pattern, made));
        }
        // In the order of `values`, whatever order the table has.
        out.sort_by_key(|(pattern, _)| values.iter().position(|v| v == pattern));
        good.then_some(out)
    }

    fn source(&mut self, file: &SourceFile, item: &Value<'_>, decls: &Decls) -> Option<SourceDecl> {
        let span = item.span();
        let DeValue::Table(table) = item.get_ref() else {
            self.wrong_type(file, "source", item, "a table");
            return None;
        };
        self.keys(file, table, "in a `[[source]]`", SOURCE_KEYS);
        let hash = entry(table, "hash").and_then(|(_, v)| self.string(file, "hash", v));
        let field = entry(table, "field").and_then(|(_, v)| self.string(file, "field", v));
        let channel = entry(table, "channel").and_then(|(_, v)| self.string(file, "channel", v));
        let read_key = entry(table, "read");
        let read = read_key
            .clone()
            .and_then(|(_, v)| self.strings(file, "read", v));
        let mut good = true;
        let (origin, declared) = match (hash, channel) {
            (Some(hash), None) => {
                let (origin, declared) = self.field_origin(file, decls, hash, field, read)?;
                (origin, Some(declared))
            }
            (None, Some(channel)) => {
                let read_span = read_key.map(|(key_span, _)| key_span);
                let origin = self.channel_origin(file, channel, field, read_span, &mut good);
                (origin, None)
            }
            (Some((_, hash_span)), Some((_, channel_span))) => {
                self.push(
                    Diagnostic::error(
                        Code::ProfileSource,
                        "a source has `hash` and `channel`: it watches one or the other",
                    )
                    .in_file(&file.name)
                    .at(channel_span, "and a channel")
                    .with_related(&file.name, hash_span, "a hash field")
                    .with_help("split it into two `[[source]]` tables"),
                );
                return None;
            }
            (None, None) => {
                self.error(
                    file,
                    Code::ProfileSource,
                    "a source names neither `hash` nor `channel`".into(),
                    span,
                    "what does it watch?",
                    "write `hash` and `field` for a hash field, or `channel` for a raw channel",
                );
                return None;
            }
        };
        let is_field = declared.is_some();
        let changes = self.changes(file, table, is_field, &mut good);
        let values: &[ValuePattern] = match (&origin, declared) {
            (Origin::Field { field, .. }, Some(hash)) => hash.field(field).unwrap_or(&[]),
            _ => &[],
        };
        let read_fields: &[String] = match &origin {
            Origin::Field { read, .. } => read,
            Origin::Channel { .. } => &[],
        };
        let names = Names {
            is_field,
            read: read_fields,
        };
        let emits = self.emits(file, table, &span, &names, values, &mut good);
        good.then(|| SourceDecl {
            origin,
            changes,
            emits,
            file: file.name.clone(),
            span,
        })
    }

    /// The origin of a source on a hash field: a declared hash, one of its
    /// fields, and the other fields it `read`s (each once).
    fn field_origin<'d>(
        &mut self,
        file: &SourceFile,
        decls: &'d Decls,
        (hash, hash_span): (String, Range<usize>),
        field: Option<(String, Range<usize>)>,
        read: Option<Vec<(String, Range<usize>)>>,
    ) -> Option<(Origin, &'d HashDecl)> {
        let Some((field, field_span)) = field else {
            self.error(
                file,
                Code::ProfileSource,
                format!("the source on hash `{hash}` names no `field`"),
                hash_span,
                "which field?",
                "add `field = \"...\"`: the field whose notifications it reads",
            );
            return None;
        };
        let Some(declared) = decls.hash(&hash) else {
            let names: Vec<&str> = decls.hashes.iter().map(|h| h.name.as_str()).collect();
            let help = suggesting(
                "declare the hash with a `[[hash]]` table, its fields and their values".to_string(),
                &hash,
                &names,
            );
            self.error(
                file,
                Code::ProfileSource,
                format!("the source's hash `{hash}` is not declared"),
                hash_span,
                "no `[[hash]]` declares it",
                &help,
            );
            return None;
        };
        if declared.field(&field).is_none() {
            let help = suggesting(
                format!("add it to `[hash.fields]` of hash `{hash}`"),
                &field,
                &declared.field_names(),
            );
            self.error(
                file,
                Code::ProfileSource,
                format!("hash `{hash}` declares no field `{field}`"),
                field_span,
                "not a declared field",
                &help,
            );
            return None;
        }
        let mut read_fields = Vec::new();
        for (name, span) in read.unwrap_or_default() {
            if declared.field(&name).is_none() {
                let help = suggesting(
                    format!("`read` names other fields of hash `{hash}`"),
                    &name,
                    &declared.field_names(),
                );
                self.error(
                    file,
                    Code::ProfileSource,
                    format!("hash `{hash}` declares no field `{name}` to read"),
                    span,
                    "not a declared field",
                    &help,
                );
                return None;
            }
            if name != field && !read_fields.contains(&name) {
                read_fields.push(name);
            }
        }
        let origin = Origin::Field {
            hash,
            field,
            read: read_fields,
        };
        Some((origin, declared))
    }

    /// The origin of a source on a raw channel, which has no `field` and
    /// reads nothing (`read_span`: the `read` key's).
    fn channel_origin(
        &mut self,
        file: &SourceFile,
        (channel, channel_span): (String, Range<usize>),
        field: Option<(String, Range<usize>)>,
        read_span: Option<Range<usize>>,
        good: &mut bool,
    ) -> Origin {
        if let Some((_, field_span)) = field {
            self.error(file, Code::ProfileSource, "a channel source has no `field`".into(), field_span, "only with `hash`", "remove `field`, or watch a hash field with `hash` and `field` instead of `channel`");
            *good = false;
        }
        if let Some(key_span) = read_span {
            self.error(
                file,
                Code::ProfileSource,
                "a channel source reads no fields".into(),
                key_span,
                "only with `hash`",
                "remove `read`: a channel's message is the whole change",
            );
            *good = false;
        }
        if channel.starts_with("ev:") {
            self.error(file, Code::ProfileSource, format!("channel `{channel}` is under `ev:`"), channel_span.clone(), "an event channel", "`ev:*` carries the bus's events, which `ruled` publishes itself: a source on one would feed back; name the raw channel a service publishes on");
            *good = false;
        }
        *good &= self.name(file, Code::ProfileSource, "channel", &channel, channel_span);
        Origin::Channel { channel }
    }

    /// `changes`: `distinct` (the default) or, on a hash source, `every`.
    fn changes(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        is_field: bool,
        good: &mut bool,
    ) -> Changes {
        let Some((_, value)) = entry(table, "changes") else {
            return Changes::Distinct;
        };
        match self.string(file, "changes", value) {
            Some((text, _)) if text == "distinct" => Changes::Distinct,
            Some((text, span)) if text == "every" => {
                if !is_field {
                    self.error(
                        file,
                        Code::ProfileSource,
                        "`changes` is for hash sources".into(),
                        span,
                        "on a channel",
                        "remove it: every message on a channel is a change",
                    );
                    *good = false;
                }
                Changes::Every
            }
            Some((text, span)) => {
                let help = suggesting(
                    "write `\"distinct\"` (the default: only a real change emits) or `\"every\"` (every notification)".to_string(),
                    &text,
                    &["distinct", "every"],
                );
                self.error(
                    file,
                    Code::ProfileSource,
                    format!("unknown `changes` value `{text}`"),
                    span,
                    "not `distinct` or `every`",
                    &help,
                );
                *good = false;
                Changes::Distinct
            }
            None => {
                *good = false;
                Changes::Distinct
            }
        }
    }

    /// The source's `[[source.emit]]` tables (at least one), checked
    /// against the names of its change and its field's `values`.
    fn emits(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        span: &Range<usize>,
        names: &Names<'_>,
        values: &[ValuePattern],
        good: &mut bool,
    ) -> Vec<EmitDecl> {
        let mut emits = Vec::new();
        let Some((_, value)) = entry(table, "emit") else {
            self.missing(
                file,
                "emit",
                span.clone(),
                "the events the source emits (`[[source.emit]]`)",
            );
            *good = false;
            return emits;
        };
        match value.get_ref() {
            DeValue::Array(items) if !items.is_empty() => {
                for item in items {
                    match self.emit(file, item, names, values) {
                        Some(emit) => emits.push(emit),
                        None => *good = false,
                    }
                }
            }
            DeValue::Array(_) => {
                self.error(
                    file,
                    Code::ProfileEmit,
                    "`emit` is empty: the source emits nothing".into(),
                    value.span(),
                    "no events",
                    "add `[[source.emit]]` tables with a `topic`",
                );
                *good = false;
            }
            _ => {
                self.wrong_type(file, "emit", value, "`[[source.emit]]` tables");
                *good = false;
            }
        }
        emits
    }

    fn emit(
        &mut self,
        file: &SourceFile,
        item: &Value<'_>,
        names: &Names<'_>,
        values: &[ValuePattern],
    ) -> Option<EmitDecl> {
        let span = item.span();
        let DeValue::Table(table) = item.get_ref() else {
            self.wrong_type(file, "emit", item, "a table");
            return None;
        };
        self.keys(file, table, "in a `[[source.emit]]`", EMIT_KEYS);
        let mut good = true;
        let (topic, topic_span) =
            self.required_string(file, table, "topic", &span, "the event's topic")?;
        if let Some(why) = topic_problem(&topic) {
            self.error(
                file,
                Code::ProfileEmit,
                format!("`{topic}` cannot be an emitted topic: {why}"),
                topic_span.clone(),
                why,
                "write a plain topic: dotted words, such as `vehicle.state.changed`",
            );
            good = false;
        }
        let from = self.conditions(file, table, "from", names, values, &mut good);
        let to = self.conditions(file, table, "to", names, values, &mut good);
        let payload = self.conditions(file, table, "payload", names, values, &mut good);
        let (when, when_text) = self.when(file, table, names, &mut good);
        let data = self.data(file, table, names, &mut good);
        good.then_some(EmitDecl {
            topic,
            from,
            to,
            payload,
            when,
            when_text,
            data,
            span: topic_span,
        })
    }

    /// An emit's `from`, `to` (hash sources) or `payload` (channel
    /// sources): value patterns; a literal `from` or `to` must be one of
    /// the field's `values`.
    fn conditions(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        key: &str,
        names: &Names<'_>,
        values: &[ValuePattern],
        good: &mut bool,
    ) -> Vec<ValuePattern> {
        let Some((key_span, value)) = entry(table, key) else {
            return Vec::new();
        };
        let allowed = (key == "payload") != names.is_field;
        if !allowed {
            let help = if names.is_field {
                "a hash source's emit matches the field's values with `from` and `to`"
            } else {
                "a channel source's emit matches the message with `payload`; it has no `from` or `to`"
            };
            self.error(
                file,
                Code::ProfileEmit,
                format!("`{key}` does not apply to this kind of source"),
                key_span,
                "not for this source",
                help,
            );
            *good = false;
            return Vec::new();
        }
        let Some(patterns) = self.patterns(file, key, value, true) else {
            *good = false;
            return Vec::new();
        };
        if key != "payload" && !values.is_empty() {
            self.field_takes(file, key, &patterns, values, good);
        }
        patterns.into_iter().map(|(p, _)| p).collect()
    }

    /// Reports each literal of `patterns` (at `key`) that none of the
    /// field's `values` matches.
    fn field_takes(
        &mut self,
        file: &SourceFile,
        key: &str,
        patterns: &[(ValuePattern, Range<usize>)],
        values: &[ValuePattern],
        good: &mut bool,
    ) {
        let literals: Vec<&str> = values.iter().filter_map(ValuePattern::as_literal).collect();
        for (pattern, span) in patterns {
            let Some(literal) = pattern.as_literal() else {
                continue;
            };
            if any_matches(values, literal) {
                continue;
            }
            let set = values
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let help = suggesting(format!("the field takes {set}"), literal, &literals);
            self.error(
                file,
                Code::ProfileValue,
                format!("`{key} = \"{literal}\"` is a value the field never takes"),
                span.clone(),
                "not one of the field's values",
                &help,
            );
            *good = false;
        }
    }

    /// An emit's `when`, checked, and its text as written.
    fn when(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        names: &Names<'_>,
        good: &mut bool,
    ) -> (Option<CheckedWhen>, Option<String>) {
        let Some((_, value)) = entry(table, "when") else {
            return (None, None);
        };
        let Some((text, span)) = self.string(file, "when", value) else {
            *good = false;
            return (None, None);
        };
        let checked = self.expression(file, &text, span, names, true);
        *good &= checked.is_some();
        (checked, Some(text))
    }

    /// An emit's `data`, in key order.
    fn data(
        &mut self,
        file: &SourceFile,
        table: &DeTable<'_>,
        names: &Names<'_>,
        good: &mut bool,
    ) -> Vec<(String, DataDecl)> {
        let mut data = Vec::new();
        if let Some((_, value)) = entry(table, "data") {
            match value.get_ref() {
                DeValue::Table(inner) => {
                    for (key, value) in inner.iter() {
                        match self.data_value(file, key.get_ref(), value, names) {
                            Some(spec) => data.push((key.get_ref().to_string(), spec)),
                            None => *good = false,
                        }
                    }
                }
                _ => {
                    self.wrong_type(
                        file,
                        "data",
                        value,
                        "an inline table (`data = { key = ... }`)",
                    );
                    *good = false;
                }
            }
        }
        data.sort_by(|a, b| a.0.cmp(&b.0));
        data
    }

    fn data_value(
        &mut self,
        file: &SourceFile,
        key: &str,
        value: &Value<'_>,
        names: &Names<'_>,
    ) -> Option<DataDecl> {
        let constant = match value.get_ref() {
            DeValue::String(text) => DataSpec::Str(text.to_string()),
            DeValue::Boolean(b) => DataSpec::Bool(*b),
            DeValue::Integer(integer) => {
                let digits = integer.as_str().replace('_', "");
                match i64::from_str_radix(&digits, integer.radix()) {
                    Ok(number) => DataSpec::Int(number),
                    Err(_) => {
                        self.error(
                            file,
                            Code::Type,
                            format!("data `{key}` is out of range"),
                            value.span(),
                            "not a 64-bit integer",
                            "write an integer between -2^63 and 2^63-1",
                        );
                        return None;
                    }
                }
            }
            DeValue::Float(float) => match float.as_str().replace('_', "").parse::<f64>() {
                Ok(number) if number.is_finite() => DataSpec::Float(number),
                _ => {
                    self.error(
                        file,
                        Code::Type,
                        format!("data `{key}` is not a finite float"),
                        value.span(),
                        "not finite",
                        "write a finite number such as `1.5`",
                    );
                    return None;
                }
            },
            DeValue::Table(inner) => return self.data_spec(file, key, value.span(), inner, names),
            _ => {
                self.wrong_type(
                    file,
                    key,
                    value,
                    "a constant or `{ value = ... }`, `{ field = ... }`, `{ expr = ... }`",
                );
                return None;
            }
        };
        Some(DataDecl::Const(constant))
    }

    fn data_spec(
        &mut self,
        file: &SourceFile,
        key: &str,
        span: Range<usize>,
        table: &DeTable<'_>,
        names: &Names<'_>,
    ) -> Option<DataDecl> {
        self.keys(file, table, "in a `data` value", DATA_KEYS);
        let mut kinds = table
            .iter()
            .filter(|(k, _)| DATA_KEYS.contains(&k.get_ref().as_ref()));
        let (Some((kind, value)), None) = (kinds.next(), kinds.next()) else {
            self.error(
                file,
                Code::ProfileEmit,
                format!("data `{key}` must name exactly one of `value`, `field` and `expr`"),
                span,
                "one of `value`, `field`, `expr`",
                "write `{ value = \"to\" }`, `{ field = \"uid\" }` or `{ expr = '...' }`",
            );
            return None;
        };
        let (text, text_span) = self.string(file, kind.get_ref(), value)?;
        match kind.get_ref().as_ref() {
            "value" => {
                let allowed: &[&str] = if names.is_field {
                    &["from", "to"]
                } else {
                    &["payload"]
                };
                match text.as_str() {
                    "from" if names.is_field => Some(DataDecl::From),
                    "to" if names.is_field => Some(DataDecl::To),
                    "payload" if !names.is_field => Some(DataDecl::Payload),
                    _ => {
                        let list = allowed
                            .iter()
                            .map(|a| format!("`{a}`"))
                            .collect::<Vec<_>>()
                            .join(" or ");
                        let help =
                            suggesting(format!("this source's values are {list}"), &text, allowed);
                        self.error(
                            file,
                            Code::ProfileEmit,
                            format!("data `{key}`: `{text}` is not a value of this source"),
                            text_span,
                            "not a value of this source",
                            &help,
                        );
                        None
                    }
                }
            }
            "field" => {
                if names.read.contains(&text) {
                    return Some(DataDecl::Field(text));
                }
                let read: Vec<&str> = names.read.iter().map(String::as_str).collect();
                let help = suggesting(
                    "a `data` field must be one of the source's `read` fields, read with the notification".to_string(),
                    &text,
                    &read,
                );
                self.error(
                    file,
                    Code::ProfileEmit,
                    format!("data `{key}` takes field `{text}`, which the source does not read"),
                    text_span,
                    "not in `read`",
                    &help,
                );
                None
            }
            _ => self
                .expression(file, &text, text_span, names, false)
                .map(DataDecl::Expr),
        }
    }

    /// Checks a `when` (`boolean`) or an `expr` against the names a
    /// source's change has.
    fn expression(
        &mut self,
        file: &SourceFile,
        text: &str,
        span: Range<usize>,
        names: &Names<'_>,
        boolean: bool,
    ) -> Option<CheckedWhen> {
        let map = StringMap::new(&file.text, span, text);
        let result = if boolean {
            when::check(text)
        } else {
            when::check_value(text)
        };
        let report = |ctx: &mut Ctx, problem: WhenProblem, warning: bool| {
            let mut diagnostic = if warning {
                Diagnostic::warning(problem.code, problem.message)
            } else {
                Diagnostic::error(problem.code, problem.message)
            }
            .in_file(&file.name)
            .at(map.map(problem.span), problem.label);
            diagnostic.help = problem.help;
            ctx.push(diagnostic);
        };
        match result {
            Ok(checked) => {
                for warning in checked.warnings.clone() {
                    report(self, warning, true);
                }
                let mut problems = Vec::new();
                names.check(&checked.expr, &mut problems);
                let good = problems.is_empty();
                for problem in problems {
                    report(self, problem, false);
                }
                good.then_some(checked)
            }
            Err(problems) => {
                for problem in problems {
                    report(self, problem, false);
                }
                None
            }
        }
    }
}

/// The names a source's expressions may read
/// (docs/sources.md#the-change-as-an-expression-sees-it).
struct Names<'a> {
    is_field: bool,
    read: &'a [String],
}

impl Names<'_> {
    fn data_keys(&self) -> Vec<&str> {
        let fixed: &[&str] = if self.is_field {
            &["hash", "field"]
        } else {
            &["channel", "payload"]
        };
        fixed
            .iter()
            .copied()
            .chain(self.read.iter().map(String::as_str))
            .collect()
    }

    fn check(&self, expr: &Expr, problems: &mut Vec<WhenProblem>) {
        match &expr.kind {
            ExprKind::Field(EventField::Src) => problems.push(WhenProblem {
                code: Code::WhenUnknownName,
                message:
                    "`src` is not known in a source: every event it emits has `src = \"adapter\"`"
                        .into(),
                span: expr.span.clone(),
                label: "not a name of the change".into(),
                help: Some(self.help()),
                fix: None,
            }),
            ExprKind::Field(EventField::From | EventField::To) if !self.is_field => {
                problems.push(WhenProblem {
                    code: Code::WhenUnknownName,
                    message: "a channel source's change has no `from` or `to`".into(),
                    span: expr.span.clone(),
                    label: "always absent here".into(),
                    help: Some(self.help()),
                    fix: None,
                })
            }
            ExprKind::Data(path) => {
                let keys = self.data_keys();
                let first = path.first().map(String::as_str).unwrap_or_default();
                if !keys.contains(&first) {
                    let mut help = self.help();
                    if let Some(close) = did_you_mean(first, &keys) {
                        help = format!("did you mean `data.{close}`? {help}");
                    }
                    problems.push(WhenProblem {
                        code: Code::WhenUnknownName,
                        message: format!("`data.{}` is not known in this source", path.join(".")),
                        span: expr.span.clone(),
                        label: "not a name of the change".into(),
                        help: Some(help),
                        fix: None,
                    });
                }
            }
            ExprKind::Unary(_, inner) => self.check(inner, problems),
            ExprKind::Binary(_, left, right) => {
                self.check(left, problems);
                self.check(right, problems);
            }
            ExprKind::Call(_, args) => {
                for arg in args {
                    self.check(arg, problems);
                }
            }
            _ => {}
        }
    }

    fn help(&self) -> String {
        let data = self
            .data_keys()
            .iter()
            .map(|k| format!("data.{k}"))
            .collect::<Vec<_>>()
            .join(", ");
        if self.is_field {
            format!("the names of a hash source's change are from, to, topic, {data} and state(\"hash\", \"field\")")
        } else {
            format!("the names of a channel source's change are topic, {data} and state(\"hash\", \"field\")")
        }
    }
}

fn syntax_error(file: &SourceFile, error: &toml::de::Error) -> Diagnostic {
    let message = error.message().trim().to_string();
    let span = error.span().unwrap_or(0..0);
    Diagnostic::error(Code::Toml, format!("TOML syntax error: {message}"))
        .in_file(&file.name)
        .at(span, message)
        .with_help("fix the TOML syntax; until then the whole file is ignored")
}
