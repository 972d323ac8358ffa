//! What `lilypad agent-stdio` reads and writes: one request line in, one event per line out.
//! The VS Code extension's TypeScript types for them are generated from these
//! (tests/tests/typescript.rs).

use std::path::PathBuf;

use lilypad_agent::{AgentConfig, Exit, Trajectory};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

/// The one request a process serves.
#[derive(Debug, Deserialize, TS)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Solve {
        task: String,
        model: ModelSpec,
        repo: RepoSpec,
        /// The folder the model is told it works in.
        #[serde(default = "default_root")]
        #[ts(as = "Option<String>", optional)]
        root: String,
        #[serde(default)]
        #[ts(as = "Option<Settings>", optional)]
        settings: Settings,
    },
}

fn default_root() -> String {
    "/repo".into()
}

#[derive(Debug, Deserialize, TS)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelSpec {
    /// A GGUF path or URL, run on the GPU.
    Gguf {
        path: String,
        #[serde(default)]
        #[ts(optional)]
        context: Option<u32>,
        #[serde(default)]
        #[ts(optional)]
        adapter: Option<String>,
        /// A PEFT LoRA adapter folder on this machine, put on the model before the run.
        #[serde(default)]
        #[ts(optional)]
        lora: Option<PathBuf>,
        /// Speculative decoding's draft: "lookup", "lookup:N" or "mtp" (`--draft`).
        #[serde(default)]
        #[ts(optional)]
        draft: Option<String>,
    },
    /// A JSON file with replies to replay: a recorded trajectory, `{"replies": [...]}` or a
    /// bare array of strings (for tests and replays).
    Scripted(PathBuf),
}

#[derive(Debug, Deserialize, TS)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RepoSpec {
    /// A folder on disk, read once into memory (version-control folders skipped).
    Folder(PathBuf),
    /// The files themselves, as UTF-8 text (for editors whose files are not on a local disk).
    Files(Vec<FileSpec>),
}

#[derive(Debug, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub path: String,
    pub text: String,
}

/// Every field may be left out (the defaults are the agent's).
#[derive(Debug, Deserialize, TS)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    #[ts(as = "Option<_>", optional)]
    pub max_steps: usize,
    #[ts(as = "Option<_>", optional)]
    pub max_tokens_per_step: usize,
    #[ts(as = "Option<_>", optional)]
    pub thinking: bool,
    #[ts(as = "Option<_>", optional)]
    pub temperature: f32,
    #[ts(as = "Option<_>", optional)]
    pub top_p: f32,
    #[ts(as = "Option<_>", optional)]
    pub top_k: u32,
    #[ts(as = "Option<_>", optional)]
    pub seed: u64,
    /// Let `python`/`pytest` run with the real Python in a scratch copy of the snapshot. Off by
    /// default: the code runs on the user's machine, so the editor asks for it explicitly.
    #[ts(as = "Option<_>", optional)]
    pub python: bool,
    /// Run that Python in the bubblewrap sandbox (no network, only its scratch copy writable,
    /// limits). On by default; without bwrap a request with `python` fails unless this is off.
    #[ts(as = "Option<_>", optional)]
    pub sandbox: bool,
}

impl Default for Settings {
    fn default() -> Self {
        let config = AgentConfig::default();
        Self {
            max_steps: config.max_steps,
            max_tokens_per_step: config.max_tokens_per_step,
            thinking: config.enable_thinking,
            temperature: config.sampling.temperature,
            top_p: config.sampling.top_p,
            top_k: config.sampling.top_k,
            seed: 0,
            python: false,
            sandbox: true,
        }
    }
}

/// One line on stdout.
#[derive(Debug, Serialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The request was read and the snapshot taken.
    Started {
        repo_root: String,
        files: usize,
    },
    LoadProgress {
        done_bytes: u64,
        total_bytes: u64,
        tensor: String,
    },
    ModelReady {
        model: String,
        /// The LoRA adapter on it: folder, rank, scale and how many linears it adapts.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        lora: Option<String>,
    },
    StepStarted {
        index: usize,
    },
    Text {
        text: String,
    },
    ToolStarted {
        name: String,
        #[ts(type = "unknown")]
        arguments: Value,
    },
    ToolFinished {
        name: Option<String>,
        observation: String,
        is_error: bool,
        duration_ms: f64,
    },
    StepFinished {
        index: usize,
        prompt_tokens: usize,
        prefilled_tokens: usize,
        generated_tokens: usize,
        prefill_ms: f64,
        decode_ms: f64,
        prefill_tokens_per_s: f64,
        decode_tokens_per_s: f64,
    },
    /// The end of a run: what changed (new contents, for the editor to show and apply), the
    /// patch and the whole trajectory.
    Done {
        exit: Option<Exit>,
        patch: String,
        changes: Vec<FileResult>,
        trajectory: Box<Trajectory>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

#[derive(Debug, Serialize, TS)]
pub struct FileResult {
    pub path: String,
    #[ts(type = "'added' | 'modified' | 'deleted'")]
    pub change: &'static str,
    /// The new contents; `None` for a deleted file, one that is not UTF-8 text, or one too
    /// large to send (`too_large`).
    pub text: Option<String>,
    /// The contents were left out for their size: the change is named, not carried.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[ts(as = "Option<bool>", optional)]
    pub too_large: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is not valid JSON or not a known request.
    BadRequest,
    /// The repository could not be read.
    Repo,
    /// The model could not be loaded or the script read.
    Model,
    /// The agent failed while running.
    Agent,
}
