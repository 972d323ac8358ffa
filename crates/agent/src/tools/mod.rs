//! FrogNano's tools: `Read`, `Write`, `Edit`, `Glob` and `Bash`, with the names, arguments,
//! limits and replies of the harness the model was post-trained on (which mirrors Claude Code's
//! tools). Every failure — a bad argument, a path outside the repository, a missing file — is an
//! error observation the model reads and recovers from, never a panic or an `Err` to the caller.

mod args;
mod bash;
mod edit;
mod glob;
mod read;
mod write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{EntryKind, ExternalShell, RepoError, RepoPath, Repository, Shell, ToolCall};
use args::Spec;

/// What a tool answers; the model reads `content` as the tool's reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct Observation {
    pub content: String,
    pub is_error: bool,
}

impl Observation {
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }
}

impl From<Result<String, String>> for Observation {
    fn from(result: Result<String, String>) -> Self {
        match result {
            Ok(text) => Self::ok(text),
            Err(text) => Self::error(text),
        }
    }
}

/// In the order the model is shown them.
const SPECS: [&Spec; 5] = [
    &read::SPEC,
    &write::SPEC,
    &edit::SPEC,
    &glob::SPEC,
    &bash::SPEC,
];

/// The tools' OpenAI-style function schemas
/// (`{"type":"function","function":{"name","description","parameters"}}`), for the chat template.
pub fn tool_schemas() -> Vec<Value> {
    SPECS.iter().map(|s| s.schema()).collect()
}

/// The tool names, in schema order.
pub fn tool_names() -> Vec<&'static str> {
    SPECS.iter().map(|s| s.name).collect()
}

/// Runs tool calls against a repository; `Bash` goes through the shell it was built with, or,
/// in the agent loop, through an [`ExternalShell`] when one is set.
pub struct Toolbox {
    shell: Box<dyn Shell>,
    external: Option<Box<dyn ExternalShell>>,
}

impl Toolbox {
    pub fn new(shell: Box<dyn Shell>) -> Self {
        Self {
            shell,
            external: None,
        }
    }

    pub fn shell(&self) -> &dyn Shell {
        self.shell.as_ref()
    }

    /// Sends the agent's `Bash` calls to `external` from now on (`None`: back to the shell).
    pub fn set_external_shell(&mut self, external: Option<Box<dyn ExternalShell>>) {
        self.external = external;
    }

    /// [`Toolbox::execute`] for the agent loop and the page, where `Bash` may await an
    /// external shell or programs that answer later (the browser's Python).
    pub async fn execute_async(
        &mut self,
        repo: &mut dyn Repository,
        call: &ToolCall,
    ) -> Observation {
        if call.name != bash::SPEC.name {
            return self.execute(repo, call);
        }
        let args = match bash::SPEC.check(&call.arguments) {
            Ok(args) => args,
            Err(problem) => return Observation::error(problem),
        };
        match self.external.as_mut() {
            Some(external) => bash::run_external(external.as_mut(), &args).await,
            None => bash::run_async(self.shell.as_mut(), repo, &args).await,
        }
    }

    pub fn execute(&mut self, repo: &mut dyn Repository, call: &ToolCall) -> Observation {
        let Some(spec) = SPECS.iter().find(|s| s.name == call.name) else {
            return Observation::error(unknown_tool(&call.name));
        };
        let args = match spec.check(&call.arguments) {
            Ok(args) => args,
            Err(problem) => return Observation::error(problem),
        };
        match spec.name {
            "Read" => read::run(repo, &args).into(),
            "Write" => write::run(repo, &args).into(),
            "Edit" => edit::run(repo, &args).into(),
            "Glob" => glob::run(repo, &args).into(),
            _ => bash::run(self.shell.as_mut(), repo, &args),
        }
    }
}

fn unknown_tool(name: &str) -> String {
    let names = tool_names();
    let hint = names
        .iter()
        .find(|n| n.eq_ignore_ascii_case(name.trim()))
        .map(|n| format!(" Did you mean `{n}`? Tool names are case-sensitive."))
        .unwrap_or_default();
    format!(
        "Unknown tool `{name}`.{hint} Available tools: {}.",
        names.join(", ")
    )
}

/// Resolves a path argument against the repository root, with its absolute form for replies;
/// escapes come back as the message.
fn resolve(repo: &dyn Repository, input: &str) -> Result<(RepoPath, String), String> {
    let path =
        RepoPath::resolve(repo.root(), &RepoPath::root(), input).map_err(|e| e.to_string())?;
    let shown = path.display_under(repo.root());
    Ok((path, shown))
}

/// The largest file Read and Edit load whole; bigger ones are looked at in parts with Bash.
const MAX_FILE_BYTES: u64 = 32 << 20;

/// A text file's bytes, or `None` when nothing is there. A folder, a special file, a binary file
/// or one over [`MAX_FILE_BYTES`] is an error naming what the model can do instead (`what` says
/// what the tool does: "Read shows", "Edit changes"); size and binary-ness are checked before
/// the file is read whole.
fn text_file(
    repo: &dyn Repository,
    path: &RepoPath,
    what: &str,
) -> Result<Option<Vec<u8>>, String> {
    let shown = path.display_under(repo.root());
    match repo.kind(path) {
        Some(EntryKind::Dir) => {
            return Err(format!(
                "{shown} is a directory, not a file. Use Glob to find files in it."
            ));
        }
        // Neither file nor folder: missing, or a FIFO, socket or device the repository names.
        None => {
            return match repo.file_len(path) {
                Err(RepoError::NotFound(_)) | Ok(_) => Ok(None),
                Err(e) => Err(e.to_string()),
            };
        }
        Some(EntryKind::File) => {}
    }
    let len = repo.file_len(path).map_err(|e| e.to_string())?;
    let head = repo
        .read_head(path, BINARY_PROBE_BYTES)
        .map_err(|e| e.to_string())?;
    if is_binary(&head) {
        return Err(format!(
            "{shown} is a binary file ({len} bytes); {what} text files only."
        ));
    }
    if len > MAX_FILE_BYTES {
        return Err(format!(
            "{shown} is {:.1} MiB, more than the {} MiB that {what} whole. Look at parts of it \
             with Bash: `grep -n PATTERN`, `head -n 100` or `sed -n '100,200p'`.",
            len as f64 / (1 << 20) as f64,
            MAX_FILE_BYTES >> 20
        ));
    }
    repo.read(path).map(Some).map_err(|e| e.to_string())
}

/// How far into a file binary-ness is judged.
const BINARY_PROBE_BYTES: usize = 8192;

/// Text files only: a NUL byte in the first 8 KiB is how `grep` and `git` spot binary files too.
fn is_binary(data: &[u8]) -> bool {
    data.iter().take(BINARY_PROBE_BYTES).any(|&b| b == 0)
}
