//! What the server knows (docs/editors.md#what-the-server-does): the open
//! documents, and for each rules directory one of them is in, its files as
//! read from disk and the last check of them with the open buffers laid
//! over (`rulec check`'s own path, [`crate::session::Session::check_loaded`]). A
//! keystroke re-checks its directory from memory: nothing is read from
//! disk until a file is saved, closed or reported changed.

use super::diagnostics::{to_lsp, Problem};
use crate::check::CheckReport;
use crate::keys::Level;
use crate::load::{load_dir, Loaded};
use crate::profile::LoadedProfile;
use crate::session::Session;
use crate::span::Lines;
use lsp_types::{PublishDiagnosticsParams, Url};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The code of a directory that cannot be read (`rulec check`'s exit 2,
/// which has no code of its own).
pub const IO_CODE: &str = "rulec::io";

/// What a document holds, which decides how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    /// A rule file: checked with its directory.
    Rules,
    /// A timeline or a test (docs/simulation.md): checked alone.
    Timeline,
    /// A TOML file outside a rules folder (a `Cargo.toml`): not checked.
    Other,
}

impl DocKind {
    /// A file in a `tests/` folder is a test; otherwise the first table
    /// header decides (`[[rule]]`, `[[topic]]` or a timeline's entries);
    /// a file with neither is a rule file in a rules folder
    /// (`in_rules_folder`), else not one of ours.
    pub fn of(path: &Path, text: &str, in_rules_folder: impl FnOnce() -> bool) -> DocKind {
        let in_tests = path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|name| name == crate::load::TESTS_FOLDER);
        if in_tests {
            return DocKind::Timeline;
        }
        match DocKind::by_header(text) {
            Some(kind) => kind,
            None if in_rules_folder() => DocKind::Rules,
            None => DocKind::Other,
        }
    }

    /// What the first table header of a rule file or timeline says.
    fn by_header(text: &str) -> Option<DocKind> {
        for line in text.lines() {
            let Some(header) = line.trim_start().strip_prefix("[[") else {
                continue;
            };
            let name = header.split(']').next().unwrap_or_default().trim();
            let path: Vec<&str> = name.split('.').collect();
            if Level::of_header(&path).is_some_and(|level| level != Level::Top) {
                return Some(DocKind::Rules);
            }
            let timeline = ruled_engine::sim::entry_kinds()
                .chain(ruled_engine::sim::EXPECTATION_KINDS)
                .any(|kind| kind == name);
            if timeline {
                return Some(DocKind::Timeline);
            }
        }
        None
    }
}

/// The largest document kept and checked: a rule file's bound, 16 MiB
/// (`rulec check` refuses a larger file too).
pub const MAX_DOCUMENT_BYTES: u64 = crate::load::MAX_RULE_FILE_LEN;

/// One open document.
#[derive(Debug, Clone)]
pub struct Document {
    pub uri: Url,
    /// Empty while the document is over the bound.
    pub text: String,
    pub version: i32,
    pub kind: DocKind,
    /// The document's length when it is over [`MAX_DOCUMENT_BYTES`]: its
    /// text is not kept, and it is not checked.
    pub too_large: Option<usize>,
}

impl Document {
    /// Drops the text when it is over the bound.
    fn bound(&mut self) {
        if self.text.len() as u64 > MAX_DOCUMENT_BYTES {
            self.too_large = Some(self.text.len());
            self.text = String::new();
        } else {
            self.too_large = None;
        }
    }

    /// Applies a client's changes. Over the bound the text is gone, so
    /// only a whole new text (a change without a range) is applied.
    fn apply(&mut self, changes: &[lsp_types::TextDocumentContentChangeEvent]) {
        for change in changes {
            if change.range.is_some() && self.too_large.is_some() {
                continue;
            }
            super::text::apply(&mut self.text, change);
            self.bound();
        }
    }

    /// The error a document over the bound gets in place of its checks.
    fn too_large_problem(&self) -> Option<Problem> {
        let length = self.too_large?;
        Some(Problem {
            span: 0..0,
            severity: crate::diagnostic::Severity::Error,
            code: IO_CODE,
            message: format!(
                "the document is {length} bytes, over the {} MiB a rule file may have \
                 ({MAX_DOCUMENT_BYTES} bytes): it is not kept or checked",
                MAX_DOCUMENT_BYTES >> 20
            ),
            help: Some("`rulec check` refuses it too; split the file".into()),
            fix: None,
            related: Vec::new(),
        })
    }
}

/// A rules directory with an open document.
#[derive(Debug, Default)]
struct Dir {
    /// Its files as on disk; the error when it could not be read.
    disk: Option<Result<Loaded, String>>,
    /// The last check, buffers laid over.
    report: Option<CheckReport>,
    /// The directory's check against the workspace's profile: each file's
    /// own checks reused while its text is the same.
    session: Option<Session>,
}

/// The open documents and the directories they are in.
#[derive(Debug, Default)]
pub struct Workspace {
    pub profile: Option<Arc<LoadedProfile>>,
    documents: HashMap<PathBuf, Document>,
    dirs: HashMap<PathBuf, Dir>,
    /// What was last published for each file (with the quick fixes in
    /// their `data`).
    published: HashMap<PathBuf, Vec<lsp_types::Diagnostic>>,
    /// Directories to check before answering, and documents checked
    /// alone (timelines; files not ours, which get no diagnostics).
    dirty_dirs: BTreeSet<PathBuf>,
    dirty_alone: BTreeSet<PathBuf>,
    /// Documents opened or changed since the last check: each is answered
    /// with its diagnostics even when they stayed the same, so that the
    /// client sees its version was checked.
    touched: BTreeSet<PathBuf>,
}

/// The rules directory of a file, and its name in it.
pub fn dir_and_name(path: &Path) -> Option<(PathBuf, String)> {
    let name = path.file_name()?.to_str()?.to_string();
    Some((path.parent()?.to_path_buf(), name))
}

impl Workspace {
    pub fn new(profile: Option<Arc<LoadedProfile>>) -> Self {
        Workspace {
            profile,
            ..Workspace::default()
        }
    }

    pub fn document(&self, path: &Path) -> Option<&Document> {
        self.documents.get(path)
    }

    /// The last check of the directory `path` is in.
    pub fn report(&self, path: &Path) -> Option<&CheckReport> {
        let (dir, _) = dir_and_name(path)?;
        self.dirs.get(&dir)?.report.as_ref()
    }

    /// The diagnostics last published for `path`.
    pub fn published(&self, path: &Path) -> &[lsp_types::Diagnostic] {
        self.published.get(path).map_or(&[], Vec::as_slice)
    }

    pub fn open(&mut self, path: PathBuf, uri: Url, text: String, version: i32) {
        let mut document = Document {
            uri,
            text,
            version,
            kind: DocKind::Rules,
            too_large: None,
        };
        document.bound();
        if let Some((dir, _)) = dir_and_name(&path) {
            // A new file, or one changed on disk while it was closed.
            self.read_disk(&dir);
        }
        document.kind = DocKind::of(&path, &document.text, || self.in_rules_folder(&path));
        let kind = document.kind;
        self.documents.insert(path.clone(), document);
        self.mark(&path, kind);
    }

    /// Applies a client's changes to an open document.
    pub fn change(
        &mut self,
        path: &Path,
        version: i32,
        changes: &[lsp_types::TextDocumentContentChangeEvent],
    ) {
        let Some(document) = self.documents.get_mut(path) else {
            return;
        };
        document.apply(changes);
        document.version = version;
        let before = document.kind;
        // Over the bound there is no text to tell: it stays what it was.
        if document.too_large.is_some() {
            self.mark(path, before);
            return;
        }
        // Its own header decides first; the folder's other files (looked
        // at through `self`) only for a file without one.
        let text = std::mem::take(&mut document.text);
        let kind = DocKind::of(path, &text, || self.in_rules_folder(path));
        let Some(document) = self.documents.get_mut(path) else {
            return;
        };
        document.text = text;
        document.kind = kind;
        if kind != before {
            // It left the other kind's checks: both are redone.
            self.mark(path, before);
        }
        self.mark(path, kind);
    }

    /// A document saved: the directory is read again (others may have
    /// changed too).
    pub fn saved(&mut self, path: &Path) {
        self.files_changed(&[path.to_path_buf()]);
    }

    pub fn close(&mut self, path: &Path) {
        let Some(document) = self.documents.remove(path) else {
            return;
        };
        if let Some((dir, _)) = dir_and_name(path) {
            // The file is what the disk says again.
            self.read_disk(&dir);
        }
        self.mark(path, document.kind);
    }

    /// Files changed on disk (`workspace/didChangeWatchedFiles`, or a
    /// save): the directories of theirs that are known are read again,
    /// and checked when they are rules folders.
    pub fn files_changed(&mut self, paths: &[PathBuf]) {
        let dirs: BTreeSet<PathBuf> = paths
            .iter()
            .filter_map(|path| path.parent().map(Path::to_path_buf))
            .filter(|dir| self.dirs.contains_key(dir))
            .collect();
        for dir in dirs {
            self.read_disk(&dir);
            if self.is_rules_folder(&dir, None) {
                self.dirty_dirs.insert(dir);
            }
        }
    }

    /// Whether the folder of `path` is a rules folder by its other files.
    fn in_rules_folder(&self, path: &Path) -> bool {
        path.parent()
            .is_some_and(|dir| self.is_rules_folder(dir, Some(path)))
    }

    /// A rules folder: one of its `*.toml` files (open or on disk, `except`
    /// left out) has a rule file's table (`[[rule]]`, `[[topic]]`).
    fn is_rules_folder(&self, dir: &Path, except: Option<&Path>) -> bool {
        let is_rules = |path: &Path, text: &str| {
            Some(path) != except && DocKind::by_header(text) == Some(DocKind::Rules)
        };
        let open = self
            .documents
            .iter()
            .any(|(path, document)| path.parent() == Some(dir) && is_rules(path, &document.text));
        let on_disk = match self.dirs.get(dir).and_then(|state| state.disk.as_ref()) {
            Some(Ok(loaded)) => loaded
                .files
                .iter()
                .any(|file| is_rules(&dir.join(&file.name), &file.text)),
            _ => false,
        };
        open || on_disk
    }

    fn mark(&mut self, path: &Path, kind: DocKind) {
        self.touched.insert(path.to_path_buf());
        match kind {
            DocKind::Rules => {
                if let Some((dir, _)) = dir_and_name(path) {
                    self.dirty_dirs.insert(dir);
                }
            }
            // Another file is answered with no diagnostics.
            DocKind::Timeline | DocKind::Other => {
                self.dirty_alone.insert(path.to_path_buf());
            }
        }
    }

    fn read_disk(&mut self, dir: &Path) {
        let disk = load_dir(dir).map_err(|error| error.to_string());
        self.dirs.entry(dir.to_path_buf()).or_default().disk = Some(disk);
    }

    /// Checks what changed since the last call; returns what to publish
    /// (only the files whose diagnostics changed).
    pub fn flush(&mut self) -> Vec<PublishDiagnosticsParams> {
        let mut out = Vec::new();
        for dir in std::mem::take(&mut self.dirty_dirs) {
            self.check_dir(&dir, &mut out);
        }
        for path in std::mem::take(&mut self.dirty_alone) {
            self.check_timeline(&path, &mut out);
        }
        self.touched.clear();
        out
    }

    /// Checks one directory with the open rule files laid over its files.
    fn check_dir(&mut self, dir: &Path, out: &mut Vec<PublishDiagnosticsParams>) {
        let state = self.dirs.entry(dir.to_path_buf()).or_default();
        let (mut loaded, unreadable) = match &state.disk {
            Some(Ok(loaded)) => (loaded.clone(), None),
            Some(Err(error)) => (Loaded::default(), Some(error.clone())),
            None => (Loaded::default(), None),
        };
        for (path, document) in &self.documents {
            if document.kind != DocKind::Rules || path.parent() != Some(dir) {
                continue;
            }
            if let Some((_, name)) = dir_and_name(path) {
                loaded.overlay(&name, &document.text);
            }
        }
        let profile = &self.profile;
        let session = self
            .dirs
            .entry(dir.to_path_buf())
            .or_default()
            .session
            .get_or_insert_with(|| Session::new(profile.clone()));
        let report = session.check_loaded(loaded);
        let problems = self.problems(dir, &report, unreadable);
        let stale: Vec<PathBuf> = self
            .published
            .keys()
            .filter(|path| path.parent() == Some(dir) && !problems.contains_key(*path))
            .filter(|path| {
                self.documents
                    .get(*path)
                    .is_none_or(|d| d.kind == DocKind::Rules)
            })
            .cloned()
            .collect();
        let texts: HashMap<PathBuf, &str> = report
            .files
            .iter()
            .map(|file| (dir.join(&file.name), file.text.as_str()))
            .collect();
        let by_path: HashMap<&Path, &str> = texts.iter().map(|(p, t)| (p.as_path(), *t)).collect();
        for (path, problems) in &problems {
            let text = by_path.get(path.as_path()).copied().unwrap_or_default();
            let lines = Lines::new(text);
            let diagnostics = problems
                .iter()
                .map(|p| to_lsp(p, &lines, &by_path))
                .collect();
            self.publish(path, diagnostics, out);
        }
        for path in stale {
            self.publish(&path, Vec::new(), out);
        }
        if let Some(state) = self.dirs.get_mut(dir) {
            state.report = Some(report);
        }
    }

    /// The problems of a directory's check by file: each file's own, the
    /// directory's (and one that it could not be read) in every open file
    /// of it, and none yet for a document just changed (it is answered
    /// all the same). An open timeline among the files speaks for itself.
    fn problems(
        &self,
        dir: &Path,
        report: &CheckReport,
        unreadable: Option<String>,
    ) -> HashMap<PathBuf, Vec<Problem>> {
        let mut problems: HashMap<PathBuf, Vec<Problem>> = HashMap::new();
        let mut everywhere = Vec::new();
        for diagnostic in &report.diagnostics {
            let problem = Problem::of(diagnostic, dir);
            match &diagnostic.file {
                Some(file) => problems.entry(dir.join(file)).or_default().push(problem),
                None => everywhere.push(problem),
            }
        }
        if let Some(error) = unreadable {
            everywhere.push(Problem {
                span: 0..0,
                severity: crate::diagnostic::Severity::Error,
                code: IO_CODE,
                message: error,
                help: Some("only the open files are checked".into()),
                fix: None,
                related: Vec::new(),
            });
        }
        self.for_open_rules(dir, |path| {
            problems
                .entry(path)
                .or_default()
                .extend(everywhere.iter().cloned());
        });
        for (path, document) in &self.documents {
            if let Some(problem) = document.too_large_problem() {
                if path.parent() == Some(dir) {
                    problems.entry(path.clone()).or_default().push(problem);
                }
            }
        }
        problems.retain(|path, _| {
            self.documents
                .get(path)
                .is_none_or(|document| document.kind == DocKind::Rules)
        });
        for path in &self.touched {
            let is_rules = self
                .documents
                .get(path)
                .is_some_and(|d| d.kind == DocKind::Rules);
            if is_rules && path.parent() == Some(dir) {
                problems.entry(path.clone()).or_default();
            }
        }
        problems
    }

    fn for_open_rules(&self, dir: &Path, mut each: impl FnMut(PathBuf)) {
        for (path, document) in &self.documents {
            if document.kind == DocKind::Rules && path.parent() == Some(dir) {
                each(path.clone());
            }
        }
    }

    fn check_timeline(&mut self, path: &Path, out: &mut Vec<PublishDiagnosticsParams>) {
        let diagnostics = match self.documents.get(path) {
            Some(document) if document.kind == DocKind::Timeline => {
                let lines = Lines::new(&document.text);
                let problems = match document.too_large_problem() {
                    Some(problem) => vec![problem],
                    None => super::timeline::problems(&document.text),
                };
                problems
                    .iter()
                    .map(|problem| to_lsp(problem, &lines, &HashMap::new()))
                    .collect()
            }
            // Closed, not ours, or a rule file now: its directory's check
            // speaks.
            _ => Vec::new(),
        };
        let rules_now = self
            .documents
            .get(path)
            .is_some_and(|document| document.kind == DocKind::Rules);
        if !rules_now {
            self.publish(path, diagnostics, out);
        }
    }

    /// Records and sends `diagnostics` for `path` unless they are what was
    /// sent last.
    fn publish(
        &mut self,
        path: &Path,
        diagnostics: Vec<lsp_types::Diagnostic>,
        out: &mut Vec<PublishDiagnosticsParams>,
    ) {
        let before = self.published.get(path).map_or(&[][..], Vec::as_slice);
        let open = self.documents.get(path);
        if before == diagnostics.as_slice() && !self.touched.contains(path) {
            return;
        }
        let uri = match open {
            Some(document) => document.uri.clone(),
            None => match Url::from_file_path(path) {
                Ok(uri) => uri,
                Err(()) => return,
            },
        };
        out.push(PublishDiagnosticsParams {
            uri,
            diagnostics: diagnostics.clone(),
            version: open.map(|document| document.version),
        });
        if diagnostics.is_empty() {
            self.published.remove(path);
        } else {
            self.published.insert(path.to_path_buf(), diagnostics);
        }
    }
}
