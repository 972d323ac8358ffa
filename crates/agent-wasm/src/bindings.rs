//! The wasm-bindgen surface `web/src/agent/` calls: `AgentWorkspace` (import, files, diff,
//! patch, tools, the agent run) and the two JS objects the agent talks to, `PythonHost`
//! (Pyodide) and `ModelHost` (a language model). Errors are JS `Error`s.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use js_sys::{Array, Function, Promise, Reflect, Uint8Array};
use lilypad_agent::shell::LocalFuture;
use lilypad_agent::{
    AgentEvent, Completion, ExternalShell, LanguageModel, ModelError, ProgramIo, PythonRunner,
    RepoPath, Repository, Request, ShellOutput, TokenSink, ToolCall, run_agent, tool_schemas,
};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{JsFuture, future_to_promise};

use crate::PageEvent;
use crate::workspace::{Workspace, agent_config};

#[wasm_bindgen(typescript_custom_section)]
const HOSTS: &str = r#"
// The shapes below come from the Rust types (web/src/lib/wire.ts is generated from them).
import type { Completion, Message, Sampling } from '../../lib/wire';

/**
 * Runs Python for the shell's `python`, `python3`, `pytest` and `pip`. The answer may be a
 * promise: the page's host runs Pyodide in a worker, which it stops at the time limit.
 */
export interface PythonHost {
  run(request: {
    root: string;
    /** The folder the command runs in (absolute, under root). */
    cwd: string;
    argv: string[];
    stdin: Uint8Array;
    /** Every file of the project, relative to root. */
    files: Array<[string, Uint8Array]>;
    /** The command's time left: the host stops the program when it runs out (absent: no limit). */
    timeout_ms?: number;
  }): PythonResult | Promise<PythonResult>;
}

export interface PythonResult {
  exitCode: number;
  output: Array<{ stream: 'stdout' | 'stderr'; text: string }>;
  /** Files the program wrote (contents) or deleted (null), relative to root. */
  changes: Array<[string, Uint8Array | null]>;
}

/**
 * A real terminal for the agent's `Bash` calls (an editor's, where the user approves each
 * command). Rejecting says why the command did not run; the model reads that as the tool's error.
 */
export interface TerminalHost {
  run(request: { command: string; timeout_ms: number }): Promise<{
    /** stdout and stderr, interleaved. */
    output: string;
    /** null when the command was stopped. */
    exit_code: number | null;
    timed_out: boolean;
  }>;
}

/** A language model: OpenAI-style messages in, the raw reply out. */
export interface ModelHost {
  readonly name: string;
  readonly contextLength: number;
  /** `onText` receives text as it is generated; it returns false when the run is stopped. */
  complete(
    request: {
      messages: Message[];
      tools: unknown[];
      sampling: Sampling;
      max_tokens: number;
      enable_thinking: boolean;
    },
    onText: (text: string) => boolean,
  ): Promise<Completion>;
}
"#;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(typescript_type = "PythonHost")]
    pub type PythonHost;
    #[wasm_bindgen(method, catch)]
    fn run(this: &PythonHost, request: &JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(typescript_type = "TerminalHost")]
    pub type TerminalHost;
    #[wasm_bindgen(method, catch, js_name = run)]
    fn run_command(this: &TerminalHost, request: &JsValue) -> Result<Promise, JsValue>;

    #[wasm_bindgen(typescript_type = "ModelHost")]
    pub type ModelHost;
    #[wasm_bindgen(method, getter)]
    fn name(this: &ModelHost) -> String;
    #[wasm_bindgen(method, getter, js_name = contextLength)]
    fn context_length(this: &ModelHost) -> f64;
    #[wasm_bindgen(method, catch)]
    fn complete(
        this: &ModelHost,
        request: &JsValue,
        on_text: &Function,
    ) -> Result<Promise, JsValue>;
}

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

fn error(message: impl std::fmt::Display) -> JsValue {
    js_sys::Error::new(&message.to_string()).into()
}

fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

fn to_js<T: Serialize + ?Sized>(value: &T) -> Result<JsValue, JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(error)
}

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// The project open in the page.
#[wasm_bindgen]
pub struct AgentWorkspace {
    inner: Rc<RefCell<Workspace>>,
}

#[wasm_bindgen]
impl AgentWorkspace {
    /// A zip or .tar.gz of the project.
    #[wasm_bindgen(js_name = fromArchive)]
    pub fn from_archive(data: &[u8]) -> Result<AgentWorkspace, JsValue> {
        Ok(Self::wrap(Workspace::from_archive(data).map_err(error)?))
    }

    /// Files from a folder picker: `paths[i]` (relative) holds `contents[i]`.
    #[wasm_bindgen(js_name = fromFiles)]
    pub fn from_files(
        paths: Vec<String>,
        contents: Vec<Uint8Array>,
    ) -> Result<AgentWorkspace, JsValue> {
        if paths.len() != contents.len() {
            return Err(error("fromFiles: as many contents as paths are needed"));
        }
        let files = paths
            .into_iter()
            .zip(contents.iter().map(Uint8Array::to_vec))
            .collect();
        Ok(Self::wrap(Workspace::from_files(files).map_err(error)?))
    }

    fn wrap(ws: Workspace) -> Self {
        Self {
            inner: Rc::new(RefCell::new(ws)),
        }
    }

    /// Where the model sees the project (`/repo`).
    pub fn root(&self) -> String {
        crate::workspace::ROOT.into()
    }

    /// Every file, relative to the root, sorted.
    pub fn files(&self) -> Vec<String> {
        self.inner.borrow().files()
    }

    #[wasm_bindgen(js_name = readFile)]
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>, JsValue> {
        self.inner.borrow().read(path).map_err(error)
    }

    #[wasm_bindgen(js_name = writeFile)]
    pub fn write_file(&self, path: &str, data: &[u8]) -> Result<(), JsValue> {
        self.inner.borrow_mut().write(path, data).map_err(error)
    }

    /// All changes since the import, as `git diff` prints them.
    pub fn diff(&self) -> String {
        self.inner.borrow().diff()
    }

    /// `[{ path, change: 'added' | 'modified' | 'deleted' }]`
    pub fn changes(&self) -> Result<JsValue, JsValue> {
        #[derive(Serialize)]
        struct Entry {
            path: String,
            change: &'static str,
        }
        let list: Vec<Entry> = self
            .inner
            .borrow()
            .changes()
            .into_iter()
            .map(|(path, change)| Entry { path, change })
            .collect();
        to_js(&list)
    }

    /// Reverts the latest change (a tool's write or edit, a shell command's, or the page's).
    pub fn undo(&self) -> Result<(), JsValue> {
        self.inner.borrow_mut().undo().map_err(error)
    }

    #[wasm_bindgen(js_name = exportZip)]
    pub fn export_zip(&self) -> Result<Vec<u8>, JsValue> {
        self.inner.borrow().export_zip().map_err(error)
    }

    /// Python for the shell from now on (`undefined`: none, the shell then says "command not found").
    #[wasm_bindgen(js_name = setPython)]
    pub fn set_python(&self, host: Option<PythonHost>) -> Result<(), JsValue> {
        let runner = host.map(|h| Box::new(JsPython(h)) as Box<dyn PythonRunner>);
        self.inner.borrow_mut().set_python(runner).map_err(error)
    }

    /// Runs one tool call as the agent would: `tool('Bash', { command: 'pytest -q' })`.
    /// Resolves to `{ content, is_error }`. The tools are lent to the call while it runs (the
    /// page may read files meanwhile; a second call or a run is refused until it ends).
    pub fn tool(&self, name: String, args: JsValue) -> Result<Promise, JsValue> {
        let arguments: serde_json::Value = serde_wasm_bindgen::from_value(args).map_err(error)?;
        let (mut toolbox, mut repo) = {
            let mut ws = self.inner.borrow_mut();
            (ws.begin_run().map_err(error)?, ws.repo())
        };
        let inner = self.inner.clone();
        Ok(future_to_promise(async move {
            let observation = toolbox
                .execute_async(&mut repo, &ToolCall { name, arguments })
                .await;
            inner.borrow_mut().end_run(toolbox);
            to_js(&observation)
        }))
    }

    /// Runs the agent on `task` with `model`. `config` overrides AgentConfig's fields
    /// (`max_steps`, `max_tokens_per_step`, `sampling`, `enable_thinking`, `system_prompt`, …).
    /// `onEvent` receives `{ type: 'step', index }`, `{ type: 'text', text }`, `{ type: 'tool', call }`,
    /// `{ type: 'observation', record }` and `{ type: 'trajectory', trajectory }` after every step;
    /// returning false stops the run. With `terminal`, the agent's `Bash` calls run there instead
    /// of in the project's shell. Resolves to the trajectory.
    pub fn run(
        &self,
        task: String,
        config: JsValue,
        model: ModelHost,
        on_event: Function,
        terminal: Option<TerminalHost>,
    ) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let overrides: serde_json::Value = if config.is_undefined() || config.is_null() {
                serde_json::Value::Null
            } else {
                serde_wasm_bindgen::from_value(config).map_err(error)?
            };
            let config = agent_config(&overrides).map_err(error)?;
            let (mut toolbox, mut repo) = {
                let mut ws = inner.borrow_mut();
                (ws.begin_run().map_err(error)?, ws.repo())
            };
            toolbox.set_external_shell(
                terminal.map(|t| Box::new(JsTerminal(t)) as Box<dyn ExternalShell>),
            );
            let mut model = JsModel { host: model };
            let mut emit = |event: AgentEvent<'_>| -> bool {
                let value = to_js(&PageEvent::from(event));
                match value.and_then(|v| on_event.call1(&JsValue::NULL, &v)) {
                    Ok(keep) => keep.as_bool() != Some(false),
                    // A throwing listener must not lose the run's record: log and go on.
                    Err(e) => {
                        web_sys_log(&format!("agent event listener failed: {}", js_message(&e)));
                        true
                    }
                }
            };
            let result = run_agent(
                &mut model,
                &mut repo,
                &mut toolbox,
                &task,
                &config,
                &mut emit,
            )
            .await;
            toolbox.set_external_shell(None);
            inner.borrow_mut().end_run(toolbox);
            let trajectory = result.map_err(error)?;
            to_js(&trajectory)
        })
    }
}

fn web_sys_log(message: &str) {
    js_sys::eval(&format!(
        "console.warn({})",
        serde_json::Value::from(message)
    ))
    .ok();
}

/// FrogNano's tool schemas, as the model is shown them.
#[wasm_bindgen(js_name = toolSchemas)]
pub fn tool_schemas_js() -> Result<JsValue, JsValue> {
    to_js(&tool_schemas())
}

/// The agent's `Bash` through the page's [`TerminalHost`].
struct JsTerminal(TerminalHost);

#[derive(serde::Deserialize)]
struct TerminalReply {
    output: String,
    exit_code: Option<i32>,
    #[serde(default)]
    timed_out: bool,
}

impl ExternalShell for JsTerminal {
    fn run<'a>(
        &'a mut self,
        command: &'a str,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<ShellOutput, String>> + 'a>> {
        Box::pin(async move {
            let request = to_js(&serde_json::json!({
                "command": command,
                "timeout_ms": timeout.as_millis() as u64,
            }))
            .map_err(|e| js_message(&e))?;
            let promise = self.0.run_command(&request).map_err(|e| js_message(&e))?;
            let value = JsFuture::from(promise).await.map_err(|e| js_message(&e))?;
            let reply: TerminalReply = serde_wasm_bindgen::from_value(value)
                .map_err(|e| format!("the terminal's reply: {e}"))?;
            Ok(ShellOutput {
                output: reply.output,
                exit_code: reply.exit_code,
                timed_out: reply.timed_out,
            })
        })
    }
}

/// Python through the page's [`PythonHost`] (Pyodide): the project's files go in, the files the
/// program wrote come back into the repository.
struct JsPython(PythonHost);

impl PythonRunner for JsPython {
    fn run<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        cwd: &'a RepoPath,
        argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32> {
        Box::pin(async move {
            match self.call(repo, cwd, argv, io).await {
                Ok(status) => status,
                Err(message) => {
                    io.write_stderr(format!("{}: {message}\n", argv[0]).as_bytes());
                    1
                }
            }
        })
    }
}

impl JsPython {
    async fn call(
        &mut self,
        repo: &mut dyn Repository,
        cwd: &RepoPath,
        argv: &[String],
        io: &mut ProgramIo,
    ) -> Result<i32, String> {
        let files = Array::new();
        for (path, data) in repo.snapshot().map_err(|e| e.to_string())? {
            let pair = Array::of2(
                &JsValue::from_str(path.as_str()),
                &Uint8Array::from(data.as_slice()),
            );
            files.push(&pair);
        }
        let request = js_sys::Object::new();
        let set =
            |k: &str, v: &JsValue| Reflect::set(&request, &JsValue::from_str(k), v).map(|_| ());
        let argv_js: Array = argv.iter().map(|a| JsValue::from_str(a)).collect();
        set("root", &JsValue::from_str(repo.root()))
            .and_then(|_| set("cwd", &JsValue::from_str(&cwd.display_under(repo.root()))))
            .and_then(|_| set("argv", &argv_js))
            .and_then(|_| set("stdin", &Uint8Array::from(io.stdin())))
            .and_then(|_| set("files", &files))
            .and_then(|_| match io.time_left() {
                Some(t) => set("timeout_ms", &JsValue::from_f64(t.as_secs_f64() * 1e3)),
                None => Ok(()),
            })
            .map_err(|e| js_message(&e))?;
        let answer = self.0.run(&request).map_err(|e| js_message(&e))?;
        // A promise (the worker's answer) or the result itself.
        let answer = JsFuture::from(Promise::resolve(&answer))
            .await
            .map_err(|e| js_message(&e))?;
        let output = get(&answer, "output");
        for chunk in Array::from(&output).iter() {
            let text = get(&chunk, "text").as_string().unwrap_or_default();
            if get(&chunk, "stream").as_string().as_deref() == Some("stderr") {
                io.write_stderr(text.as_bytes());
            } else {
                io.write_stdout(text.as_bytes());
            }
        }
        for change in Array::from(&get(&answer, "changes")).iter() {
            let pair = Array::from(&change);
            let name = pair.get(0).as_string().ok_or("a change without a path")?;
            let path = RepoPath::new(&name).map_err(|e| e.to_string())?;
            let data = pair.get(1);
            let done = if data.is_null() || data.is_undefined() {
                if repo.kind(&path).is_some() {
                    repo.remove(&path)
                } else {
                    Ok(())
                }
            } else {
                repo.write(&path, &Uint8Array::new(&data).to_vec())
            };
            done.map_err(|e| e.to_string())?;
        }
        let status = get(&answer, "exitCode").as_f64().ok_or("no exit code")?;
        Ok(status as i32)
    }
}

/// A language model in JS; its text streams into the agent's sink as it arrives.
struct JsModel {
    host: ModelHost,
}

/// Text the JS side has delivered that the agent has not seen yet.
#[derive(Default)]
struct Stream {
    chunks: VecDeque<String>,
    waker: Option<Waker>,
    stopped: bool,
}

/// Awaits the model's promise while passing its streamed text to the sink.
struct Streamed<'s, 'a> {
    promise: JsFuture,
    stream: Rc<RefCell<Stream>>,
    sink: &'s mut TokenSink<'a>,
}

impl Streamed<'_, '_> {
    fn drain(&mut self) {
        loop {
            let Some(chunk) = self.stream.borrow_mut().chunks.pop_front() else {
                break;
            };
            if !(self.sink)(&chunk) {
                self.stream.borrow_mut().stopped = true;
            }
        }
    }
}

impl Future for Streamed<'_, '_> {
    type Output = Result<JsValue, JsValue>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.drain();
        self.stream.borrow_mut().waker = Some(cx.waker().clone());
        let done = Pin::new(&mut self.promise).poll(cx);
        if done.is_ready() {
            self.drain();
        }
        done
    }
}

impl LanguageModel for JsModel {
    fn name(&self) -> String {
        self.host.name()
    }

    fn context_length(&self) -> usize {
        self.host.context_length() as usize
    }

    async fn complete(
        &mut self,
        req: &Request<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<Completion, ModelError> {
        let other = |e: JsValue| ModelError::Other(js_message(&e));
        let request = to_js(&serde_json::json!({
            "messages": req.messages,
            "tools": req.tools,
            "sampling": req.sampling,
            "max_tokens": req.max_tokens,
            "enable_thinking": req.enable_thinking,
        }))
        .map_err(other)?;
        let stream = Rc::new(RefCell::new(Stream::default()));
        let feed = stream.clone();
        let on_chunk = Closure::<dyn FnMut(String) -> bool>::new(move |text: String| {
            let mut s = feed.borrow_mut();
            s.chunks.push_back(text);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
            !s.stopped
        });
        let promise = self
            .host
            .complete(&request, on_chunk.as_ref().unchecked_ref())
            .map_err(other)?;
        let result = Streamed {
            promise: JsFuture::from(promise),
            stream,
            sink: on_text,
        }
        .await;
        drop(on_chunk);
        match result {
            Ok(value) => serde_wasm_bindgen::from_value(value)
                .map_err(|e| ModelError::Other(format!("the model's reply: {e}"))),
            Err(e) if get(&e, "code").as_string().as_deref() == Some("context-full") => {
                Err(ModelError::ContextFull {
                    needed: 0,
                    capacity: self.context_length(),
                })
            }
            Err(e) => Err(other(e)),
        }
    }
}
