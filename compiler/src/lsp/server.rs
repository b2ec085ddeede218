//! The message loop (docs/editors.md#the-protocol): one thread, requests
//! answered in order. Notifications that are already waiting are applied
//! together before one check, so a burst of keystrokes is checked once;
//! before a request is answered, every pending check is done, so a code
//! action or a hover always sees the text as it is.

use super::complete::{self, What};
use super::definition::{self, Target};
use super::diagnostics::{quick_fixes, to_lsp, Problem};
use super::facts::Facts;
use super::profile_copy::ProfileCopy;
use super::transport::{self, Incoming, Malformed};
use super::workspace::{dir_and_name, DocKind, Workspace};
use super::{hover, text};
use crate::profile::LoadedProfile;
use crate::span::Lines;
use lsp_server::{ErrorCode, Message, Notification, Request, Response};
use lsp_types::notification::{self as notif, Notification as _};
use lsp_types::request::{self as req, Request as _};
use lsp_types::{
    CodeActionKind, CodeActionOptions, CodeActionProviderCapability, CompletionItem,
    CompletionItemKind, CompletionList, CompletionOptions, CompletionTextEdit, Documentation,
    GotoDefinitionResponse, Hover, HoverContents, HoverProviderCapability, InitializeParams,
    Location, MarkupContent, MarkupKind, MessageType, OneOf, PositionEncodingKind,
    PublishDiagnosticsParams, ServerCapabilities, TextDocumentSyncCapability, TextDocumentSyncKind,
    TextDocumentSyncOptions, TextDocumentSyncSaveOptions, TextEdit, Url,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

/// What the server offers (LSP 3.17).
fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        position_encoding: Some(PositionEncodingKind::UTF16),
        text_document_sync: Some(TextDocumentSyncCapability::Options(
            TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::INCREMENTAL),
                save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                ..TextDocumentSyncOptions::default()
            },
        )),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(["\"", "'", ".", "(", "[", ","].map(str::to_string).to_vec()),
            ..CompletionOptions::default()
        }),
        definition_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
            code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
            ..CodeActionOptions::default()
        })),
        ..ServerCapabilities::default()
    }
}

/// Why the server stopped before the client's `exit`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the client's connection closed")]
    Closed,
}

/// The server's state: the workspace and the connection it answers on.
struct Server<'c> {
    incoming: &'c Receiver<Incoming>,
    out: &'c mut dyn Write,
    workspace: Workspace,
    /// The built-in profile's files for go to definition, once asked for.
    profile_copy: Option<ProfileCopy>,
}

/// Runs the protocol until the client says `exit` or `incoming` ends,
/// answering on `out`.
pub fn serve(
    incoming: &Receiver<Incoming>,
    out: &mut dyn Write,
    workspace: Workspace,
) -> Result<(), ServeError> {
    let mut server = Server {
        incoming,
        out,
        workspace,
        profile_copy: None,
    };
    let Some(params) = server.initialize()? else {
        return Ok(());
    };
    server.start(&params)?;
    loop {
        let Ok(first) = incoming.recv() else {
            return Ok(());
        };
        // Keystrokes already waiting are applied before one check.
        let mut batch = vec![first];
        while let Ok(more) = incoming.try_recv() {
            batch.push(more);
        }
        for incoming in batch {
            let message = match incoming {
                Incoming::Message(message) => message,
                Incoming::Malformed(malformed) => {
                    server.refuse(&malformed)?;
                    continue;
                }
            };
            match message {
                // Answered again if asked again (Neovim 0.7 may); then
                // only `exit`, or the client closing the pipe, ends it.
                Message::Request(request) if request.method == req::Shutdown::METHOD => {
                    server.send(Response::new_ok(request.id, ()))?;
                }
                Message::Request(request) => {
                    server.flush()?;
                    server.answer(request)?;
                }
                Message::Notification(notification)
                    if notification.method == notif::Exit::METHOD =>
                {
                    return Ok(());
                }
                Message::Notification(notification) => server.notified(notification)?,
                Message::Response(_) => {}
            }
        }
        server.flush()?;
    }
}

impl Server<'_> {
    fn send(&mut self, message: impl Into<Message>) -> Result<(), ServeError> {
        message
            .into()
            .write(&mut self.out)
            .map_err(|_| ServeError::Closed)
    }

    /// The JSON-RPC error for what could not be read as a message (its
    /// id `null` when it has none that could be read).
    fn refuse(&mut self, malformed: &Malformed) -> Result<(), ServeError> {
        let reply = json!({
            "jsonrpc": "2.0",
            "id": malformed.id,
            "error": { "code": malformed.code as i32, "message": malformed.message },
        });
        transport::write(self.out, &reply).map_err(|_| ServeError::Closed)
    }

    /// Waits for `initialize` and answers it; what comes before it is
    /// refused or dropped (LSP 3.17), `None` when the client leaves first.
    fn initialize(&mut self) -> Result<Option<InitializeParams>, ServeError> {
        loop {
            let Ok(incoming) = self.incoming.recv() else {
                return Err(ServeError::Closed);
            };
            let request = match incoming {
                Incoming::Malformed(malformed) => {
                    self.refuse(&malformed)?;
                    continue;
                }
                Incoming::Message(Message::Request(request)) => request,
                Incoming::Message(Message::Notification(n)) if n.method == notif::Exit::METHOD => {
                    return Ok(None);
                }
                Incoming::Message(_) => continue,
            };
            if request.method != req::Initialize::METHOD {
                let message = "rulec lsp: not initialized yet".to_string();
                let code = ErrorCode::ServerNotInitialized as i32;
                self.send(Response::new_err(request.id, code, message))?;
                continue;
            }
            match serde_json::from_value::<InitializeParams>(request.params) {
                Ok(params) => {
                    let result = json!({
                        "capabilities": capabilities(),
                        "serverInfo": { "name": "rulec", "version": env!("CARGO_PKG_VERSION") },
                    });
                    self.send(Response::new_ok(request.id, result))?;
                    return Ok(Some(params));
                }
                Err(error) => {
                    let message = format!("bad initialize params: {error}");
                    let code = ErrorCode::InvalidParams as i32;
                    self.send(Response::new_err(request.id, code, message))?;
                }
            }
        }
    }

    /// A line in the client's log (`window/logMessage`).
    fn log(&mut self, kind: MessageType, message: String) -> Result<(), ServeError> {
        let params = lsp_types::LogMessageParams { typ: kind, message };
        self.send(Notification::new(notif::LogMessage::METHOD.into(), params))
    }

    /// After `initialize`: watch rule files where the client can, and show
    /// the profile's own diagnostics.
    fn start(&mut self, params: &InitializeParams) -> Result<(), ServeError> {
        let can_watch = params
            .capabilities
            .workspace
            .as_ref()
            .and_then(|w| w.did_change_watched_files.as_ref())
            .and_then(|w| w.dynamic_registration)
            .unwrap_or(false);
        if can_watch {
            let registration = lsp_types::Registration {
                id: "rulec-toml".into(),
                method: notif::DidChangeWatchedFiles::METHOD.into(),
                register_options: Some(json!({ "watchers": [{ "globPattern": "**/*.toml" }] })),
            };
            let params = lsp_types::RegistrationParams {
                registrations: vec![registration],
            };
            let id = lsp_server::RequestId::from("rulec-watch".to_string());
            self.send(Request::new(
                id,
                req::RegisterCapability::METHOD.into(),
                params,
            ))?;
        }
        let profile = self.workspace.profile.clone();
        let description = match &profile {
            Some(profile) => format!("profile `{}` ({})", profile.name, profile.digest),
            None => "no profile (--profile none)".to_string(),
        };
        self.log(MessageType::INFO, format!("rulec lsp: {description}"))?;
        if let Some(profile) = profile {
            for params in profile_diagnostics(&profile) {
                self.send(Notification::new(
                    notif::PublishDiagnostics::METHOD.into(),
                    params,
                ))?;
            }
        }
        Ok(())
    }

    /// Checks what changed and publishes what differs.
    fn flush(&mut self) -> Result<(), ServeError> {
        for params in self.workspace.flush() {
            self.send(Notification::new(
                notif::PublishDiagnostics::METHOD.into(),
                params,
            ))?;
        }
        Ok(())
    }

    /// A notification's params, or a warning in the client's log (it
    /// cannot be answered).
    fn params<T: DeserializeOwned>(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Option<T>, ServeError> {
        match serde_json::from_value(params) {
            Ok(params) => Ok(Some(params)),
            Err(error) => {
                let message = format!("rulec lsp: {method} ignored: bad params: {}", clip(&error));
                self.log(MessageType::WARNING, message)?;
                Ok(None)
            }
        }
    }

    fn notified(&mut self, notification: Notification) -> Result<(), ServeError> {
        let (method, params) = (notification.method.as_str(), notification.params);
        match method {
            notif::DidOpenTextDocument::METHOD => {
                let Some(p) =
                    self.params::<lsp_types::DidOpenTextDocumentParams>(method, params)?
                else {
                    return Ok(());
                };
                if let Some(path) = file_path(&p.text_document.uri) {
                    let doc = p.text_document;
                    self.workspace.open(path, doc.uri, doc.text, doc.version);
                }
            }
            notif::DidChangeTextDocument::METHOD => {
                let Some(p) =
                    self.params::<lsp_types::DidChangeTextDocumentParams>(method, params)?
                else {
                    return Ok(());
                };
                if let Some(path) = file_path(&p.text_document.uri) {
                    let version = p.text_document.version;
                    self.workspace.change(&path, version, &p.content_changes);
                }
            }
            notif::DidSaveTextDocument::METHOD => {
                let Some(p) =
                    self.params::<lsp_types::DidSaveTextDocumentParams>(method, params)?
                else {
                    return Ok(());
                };
                if let Some(path) = file_path(&p.text_document.uri) {
                    self.workspace.saved(&path);
                }
            }
            notif::DidCloseTextDocument::METHOD => {
                let Some(p) =
                    self.params::<lsp_types::DidCloseTextDocumentParams>(method, params)?
                else {
                    return Ok(());
                };
                if let Some(path) = file_path(&p.text_document.uri) {
                    self.workspace.close(&path);
                }
            }
            notif::DidChangeWatchedFiles::METHOD => {
                let Some(p) =
                    self.params::<lsp_types::DidChangeWatchedFilesParams>(method, params)?
                else {
                    return Ok(());
                };
                let paths: Vec<PathBuf> =
                    p.changes.iter().filter_map(|c| file_path(&c.uri)).collect();
                self.workspace.files_changed(&paths);
            }
            // `initialized`, `$/cancelRequest` (every answer is immediate),
            // configuration: nothing to do.
            _ => {}
        }
        Ok(())
    }

    fn answer(&mut self, request: Request) -> Result<(), ServeError> {
        let id = request.id.clone();
        let result = match request.method.as_str() {
            req::HoverRequest::METHOD => self.hover(request.params),
            req::Completion::METHOD => self.completion(request.params),
            req::GotoDefinition::METHOD => self.definition(request.params),
            req::CodeActionRequest::METHOD => self.code_actions(request.params),
            method => {
                let message = format!("rulec lsp does not answer {method}");
                return self.send(Response::new_err(
                    id,
                    ErrorCode::MethodNotFound as i32,
                    message,
                ));
            }
        };
        match result {
            Ok(value) => self.send(Response::new_ok(id, value)),
            Err(message) => self.send(Response::new_err(
                id,
                ErrorCode::InvalidParams as i32,
                message,
            )),
        }
    }

    /// The open rule file at a request's position: its path, text and the
    /// position as a byte offset.
    fn at(&self, params: &lsp_types::TextDocumentPositionParams) -> Option<(PathBuf, &str, usize)> {
        let path = file_path(&params.text_document.uri)?;
        let document = self.workspace.document(&path)?;
        if document.kind != DocKind::Rules {
            return None;
        }
        let offset = text::offset(&Lines::new(&document.text), params.position);
        Some((path, document.text.as_str(), offset))
    }

    fn facts(&self, path: &Path) -> Facts<'_> {
        let report = self.workspace.report(path);
        Facts {
            profile: self.workspace.profile.as_deref(),
            topics: report.map_or(&[], |report| &report.topics),
            envelope: report.map(|report| &report.envelope),
        }
    }

    fn hover(&self, params: Value) -> Result<Value, String> {
        let params: lsp_types::HoverParams = parse(params)?;
        let Some((path, text, offset)) = self.at(&params.text_document_position_params) else {
            return Ok(Value::Null);
        };
        let Some(markdown) = hover::hover(text, offset, self.facts(&path)) else {
            return Ok(Value::Null);
        };
        let hover = Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: markdown,
            }),
            range: None,
        };
        Ok(json!(hover))
    }

    fn completion(&self, params: Value) -> Result<Value, String> {
        let params: lsp_types::CompletionParams = parse(params)?;
        let Some((path, text, offset)) = self.at(&params.text_document_position) else {
            return Ok(Value::Null);
        };
        let lines = Lines::new(text);
        let items: Vec<CompletionItem> = complete::complete(text, offset, self.facts(&path))
            .into_iter()
            .map(|candidate| CompletionItem {
                kind: Some(match candidate.what {
                    What::Key => CompletionItemKind::PROPERTY,
                    What::Header => CompletionItemKind::MODULE,
                    What::Value => CompletionItemKind::VALUE,
                    What::Topic => CompletionItemKind::EVENT,
                    What::Function => CompletionItemKind::FUNCTION,
                    What::Field => CompletionItemKind::FIELD,
                }),
                detail: candidate.detail,
                documentation: candidate.doc.map(|value| {
                    Documentation::MarkupContent(MarkupContent {
                        kind: MarkupKind::Markdown,
                        value,
                    })
                }),
                text_edit: Some(CompletionTextEdit::Edit(TextEdit {
                    range: text::range(&lines, &candidate.replace),
                    new_text: candidate.insert,
                })),
                label: candidate.label,
                ..CompletionItem::default()
            })
            .collect();
        Ok(json!(CompletionList {
            is_incomplete: false,
            items,
        }))
    }

    fn definition(&mut self, params: Value) -> Result<Value, String> {
        let params: lsp_types::GotoDefinitionParams = parse(params)?;
        let Some((path, text, offset)) = self.at(&params.text_document_position_params) else {
            return Ok(Value::Null);
        };
        let target = definition::definition(text, offset, self.facts(&path));
        let location = match target {
            Some(Target::Rules { file, span }) => self.rules_location(&path, &file, &span),
            Some(Target::Profile { file, span }) => self.profile_location(&file, &span)?,
            None => None,
        };
        Ok(match location {
            Some(location) => json!(GotoDefinitionResponse::Scalar(location)),
            None => Value::Null,
        })
    }

    /// A place in a file of the profile: where it is on disk, else (the
    /// built-in profile, which lives only in the binary) in a copy in
    /// this server's private folder.
    fn profile_location(
        &mut self,
        file: &str,
        span: &std::ops::Range<usize>,
    ) -> Result<Option<Location>, String> {
        let Some(profile) = self.workspace.profile.clone() else {
            return Ok(None);
        };
        let Some(source) = profile.files.iter().find(|f| f.name == file) else {
            return Ok(None);
        };
        let path = match profile_file_as_named(file, &source.text) {
            Some(path) => path,
            None => self
                .profile_copy(&source.name, &source.text)
                .map_err(|error| {
                    format!("writing the profile's `{file}` for its definition: {error}")
                })?,
        };
        Ok(Url::from_file_path(path).ok().map(|uri| Location {
            uri,
            range: text::range(&Lines::new(&source.text), span),
        }))
    }

    /// The built-in profile's file `name`, written to the server's private
    /// folder (made at the first use).
    fn profile_copy(&mut self, name: &str, text: &str) -> std::io::Result<PathBuf> {
        let copy = match &mut self.profile_copy {
            Some(copy) => copy,
            None => self
                .profile_copy
                .insert(ProfileCopy::create(&std::env::temp_dir())?),
        };
        copy.file(name, text)
    }

    /// A place in a rule file of `path`'s directory.
    fn rules_location(
        &self,
        path: &Path,
        file: &str,
        span: &std::ops::Range<usize>,
    ) -> Option<Location> {
        let (dir, _) = dir_and_name(path)?;
        let report = self.workspace.report(path)?;
        let source = report.files.iter().find(|f| f.name == file)?;
        let uri = Url::from_file_path(dir.join(file)).ok()?;
        Some(Location {
            uri,
            range: text::range(&Lines::new(&source.text), span),
        })
    }

    fn code_actions(&self, params: Value) -> Result<Value, String> {
        // Only the document and the range: the fixes are those published,
        // and some clients send incomplete diagnostics in the context
        // (Neovim 0.7 sends only their `code` and `data`).
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Asked {
            text_document: lsp_types::TextDocumentIdentifier,
            range: lsp_types::Range,
        }
        let params: Asked = parse(params)?;
        let Some(path) = file_path(&params.text_document.uri) else {
            return Ok(Value::Null);
        };
        let actions = quick_fixes(
            &params.text_document.uri,
            self.workspace.published(&path),
            params.range,
        );
        Ok(json!(actions))
    }
}

fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, String> {
    serde_json::from_value(params).map_err(|error| format!("bad params: {}", clip(&error)))
}

/// The longest reason sent back about the client's params.
const MAX_REASON: usize = 200;

/// `error` in at most [`MAX_REASON`] bytes: serde quotes the value it did
/// not expect, which may be as long as the message.
fn clip(error: &serde_json::Error) -> String {
    let mut text = error.to_string();
    if text.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// The local file a `file:` URI names.
fn file_path(uri: &Url) -> Option<PathBuf> {
    uri.to_file_path().ok()
}

/// A profile file on disk as named (relative to the current directory),
/// when that file holds the same text (read like every input file: a
/// regular file, within a profile file's bound).
fn profile_file_as_named(name: &str, text: &str) -> Option<PathBuf> {
    let as_named = std::env::current_dir().ok()?.join(name);
    rulecore_io::input_file::read_bounded(&as_named, crate::profile::read::MAX_PROFILE_FILE_LEN)
        .is_ok_and(|on_disk| on_disk == text.as_bytes())
        .then_some(as_named)
}

/// The profile's own diagnostics, on its files (a profile directory's;
/// the built-in profile has none).
fn profile_diagnostics(profile: &LoadedProfile) -> Vec<PublishDiagnosticsParams> {
    let Ok(cwd) = std::env::current_dir() else {
        return Vec::new();
    };
    let mut by_file: HashMap<&str, Vec<Problem>> = HashMap::new();
    for diagnostic in &profile.diagnostics {
        let file = diagnostic.file.as_deref().unwrap_or("profile.toml");
        by_file
            .entry(file)
            .or_default()
            .push(Problem::of(diagnostic, &cwd));
    }
    let texts: HashMap<PathBuf, &str> = profile
        .files
        .iter()
        .map(|f| (cwd.join(&f.name), f.text.as_str()))
        .collect();
    let by_path: HashMap<&Path, &str> = texts.iter().map(|(p, t)| (p.as_path(), *t)).collect();
    by_file
        .into_iter()
        .filter_map(|(file, problems)| {
            let path = cwd.join(file);
            let text = by_path.get(path.as_path()).copied().unwrap_or_default();
            let lines = Lines::new(text);
            Some(PublishDiagnosticsParams {
                uri: Url::from_file_path(&path).ok()?,
                diagnostics: problems
                    .iter()
                    .map(|p| to_lsp(p, &lines, &by_path))
                    .collect(),
                version: None,
            })
        })
        .collect()
}
