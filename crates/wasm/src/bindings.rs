//! The wasm-bindgen surface the Web Worker calls: `inspectHeader`, `loadEngine` and the
//! `Engine` class (with `setLora` for LoRA adapters, see `lora.rs`). Requests and results are
//! plain JSON-compatible objects (see `api.rs`); errors are JS `Error`s carrying a `code` (see
//! `error.rs`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use js_sys::{Function, Promise};
use lilypad_chat::{ChatSession, PrefixStore};
use lilypad_engine::{
    AdapterOptions, Draft, EngineError, GpuContext, LlamaConfig, LoadProgress, Model, ModelOptions,
};
use lilypad_gguf::GgufFile;
use lilypad_lm::{PromptProgress, Request};
use lilypad_tokenizer::TextTokenizer;
use serde::Serialize;
use serde::de::DeserializeOwned;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::api::{
    AdapterInfo, ChatRequest, EngineInfo, GenerationResult, HeaderInfo, LoadOptions, ModelInfo,
    PromptRequest, UploadProgress,
};
use crate::error::WebError;
use crate::lora;
use crate::source::{JsByteSource, ModelReader};

#[wasm_bindgen(typescript_custom_section)]
const MODEL_READER: &str = r#"
/** Synchronous ranged reads of a model file; `undefined` when the range is not there yet. */
export interface ModelReader {
  readonly size: number;
  readAt(offset: number, length: number): Uint8Array | undefined;
}
"#;

#[wasm_bindgen(typescript_custom_section)]
const PROMPT_STATES: &str = r#"
/**
 * Where a conversation's opening (the system prompt with its tools) is kept once computed, so
 * that a later conversation that opens the same way, after a reload too, starts from it.
 * `load` answers synchronously (the worker reads its file with FileReaderSync); `save` may
 * store in the background. Keys name the model's weights and the opening's tokens.
 */
export interface PromptStateStore {
  load(key: string): Uint8Array | undefined;
  save(key: string, state: Uint8Array): void;
}
"#;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(typescript_type = "PromptStateStore")]
    pub type PromptStateStore;

    #[wasm_bindgen(method, catch)]
    fn load(this: &PromptStateStore, key: &str) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, catch)]
    fn save(this: &PromptStateStore, key: &str, state: &[u8]) -> Result<(), JsValue>;
}

/// The page's [`PromptStateStore`] as the chat session's prefix store. A store that fails
/// costs time only: the opening is evaluated again.
struct JsPrefixStore(PromptStateStore);

impl PrefixStore for JsPrefixStore {
    fn load(&mut self, key: &str) -> Option<Vec<u8>> {
        let state = self.0.load(key).ok()?;
        state
            .dyn_ref::<js_sys::Uint8Array>()
            .map(js_sys::Uint8Array::to_vec)
    }

    fn save(&mut self, key: &str, state: &[u8]) {
        if let Err(e) = self.0.save(key, state) {
            web_sys::console::warn_1(
                &format!("lilypad: the prompt state was not saved: {e:?}").into(),
            );
        }
    }
}

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

impl From<WebError> for JsValue {
    fn from(e: WebError) -> JsValue {
        let error = js_sys::Error::new(&e.message);
        // Setting a property on a fresh Error cannot fail.
        let _ = js_sys::Reflect::set(&error, &"code".into(), &e.code.into());
        error.into()
    }
}

/// The message of a JS exception, whatever was thrown.
pub(crate) fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

fn to_js<T: Serialize>(value: &T) -> Result<JsValue, WebError> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| WebError::new("internal", e.to_string()))
}

fn from_js<T: DeserializeOwned>(value: JsValue, what: &str) -> Result<T, WebError> {
    serde_wasm_bindgen::from_value(value).map_err(|e| WebError::request(format!("{what}: {e}")))
}

/// Parses the GGUF header from whatever part of the file has arrived and checks that the
/// engine runs its architecture. Returns `null` while the header is still incomplete, so a
/// download can call it after each chunk and fail early on a file that will never load.
#[wasm_bindgen(js_name = inspectHeader)]
pub fn inspect_header(reader: ModelReader) -> Result<JsValue, JsValue> {
    let src = JsByteSource::new(reader);
    let file = match GgufFile::read(&src) {
        Ok(file) => file,
        Err(_) if src.hit_missing() => return Ok(JsValue::NULL),
        Err(e) => return Err(WebError::from(e).into()),
    };
    let cfg = LlamaConfig::from_gguf(&file).map_err(WebError::from)?;
    let info = HeaderInfo {
        architecture: cfg.arch.clone(),
        tensors: file.tensors.len(),
        parameters: file.parameter_count(),
        data_offset: file.data_offset,
        context_train: cfg.context_train,
        chat_template: file.metadata.get("tokenizer.chat_template").is_some(),
    };
    Ok(to_js(&info)?)
}

/// Opens the browser's WebGPU device, reads the model through `reader` tensor by tensor into
/// GPU buffers and returns a ready engine. `on_progress` receives [`UploadProgress`] objects.
/// `lora_config` and `lora_weights`, the bytes of a PEFT adapter's `adapter_config.json` and
/// `adapter_model.safetensors`, put a LoRA adapter on the model; they are checked against the
/// header before any weight is read.
#[wasm_bindgen(js_name = loadEngine)]
pub async fn load_engine(
    reader: ModelReader,
    name: String,
    options: JsValue,
    on_progress: Function,
    lora_config: Option<Vec<u8>>,
    lora_weights: Option<Vec<u8>>,
) -> Result<Engine, JsValue> {
    let options: LoadOptions = if options.is_undefined() || options.is_null() {
        LoadOptions::default()
    } else {
        from_js(options, "load options")?
    };
    let src = JsByteSource::new(reader);
    let file = GgufFile::read(&src).map_err(WebError::from)?;
    let cfg = LlamaConfig::from_gguf(&file).map_err(WebError::from)?;
    let tok = TextTokenizer::from_gguf(&file.metadata).map_err(WebError::from)?;
    // A bad adapter fails now, not after the upload.
    let adapter = lora::read_adapter(lora_config.as_deref(), lora_weights.as_deref(), &file)?;
    drop((lora_config, lora_weights));
    let adapter_options = AdapterOptions {
        host_memory: device_memory(),
        fallback_name: options.adapter_name.clone(),
        ..AdapterOptions::default()
    };
    let gpu = GpuContext::new(&adapter_options)
        .await
        .map_err(WebError::from)?;

    let tensors_total = cfg.tensor_shapes().len();
    let mut tensors_done = 0;
    let mut report = |p: LoadProgress| {
        tensors_done += 1;
        let event = UploadProgress {
            phase: "upload",
            tensor: p.tensor,
            tensors_done,
            tensors_total,
            bytes_done: p.done_bytes,
            bytes_total: p.total_bytes,
        };
        // Progress is informational: a throwing listener must not fail the load.
        if let Ok(event) = to_js(&event) {
            let _ = on_progress.call1(&JsValue::NULL, &event);
        }
    };
    let draft = options.draft()?;
    let opts = ModelOptions {
        context: options.context,
        max_chunk_bytes: options.max_chunk_bytes,
        kv_cache: options.kv_cache()?,
        mtp: draft == Some(Draft::Mtp),
        ..Default::default()
    };
    let mut model = Model::load(gpu.clone(), &file, &src, &opts, &mut report)
        .await
        .map_err(WebError::from)?;
    model.set_draft(draft).map_err(WebError::from)?;
    if let Some(adapter) = &adapter {
        model.set_lora(Some(adapter)).map_err(lora::apply_error)?;
    }
    let info = EngineInfo {
        adapter: AdapterInfo::new(&gpu),
        model: ModelInfo::new(&name, &model, file.parameter_count(), file.file_len),
        lora: adapter.as_ref().map(lora::info),
    };
    let chat = ChatSession::new(model, tok, &name).map_err(WebError::from)?;
    let header = lora::adapter_header(file);
    Ok(Engine {
        session: Rc::new(RefCell::new(Some(Session { chat, info, header }))),
        gpu,
    })
}

struct Session {
    chat: ChatSession,
    info: EngineInfo,
    /// The model's header without its vocabulary: what later adapters are mapped with.
    header: GgufFile,
}

/// A loaded model. One request runs at a time (a second one fails with code `busy`); the
/// conversation's state is kept between chat requests that extend it.
#[wasm_bindgen]
pub struct Engine {
    session: Rc<RefCell<Option<Session>>>,
    /// Held apart from the session, which a running request borrows.
    gpu: Arc<GpuContext>,
}

/// `error`, or `device-lost` with its reason when the device turns out to be lost: the
/// device's `lost` promise may settle a turn of the event loop after the failure it caused
/// (a read-back rejected by a destroyed device).
async fn lost_or(gpu: &GpuContext, error: WebError) -> WebError {
    if error.code == "device-lost" {
        return error;
    }
    // Up to five turns, 20 ms apart.
    for _ in 0..5 {
        if let Err(lost @ EngineError::DeviceLost(_)) = gpu.check() {
            return lost.into();
        }
        tick().await;
    }
    match gpu.check() {
        Err(lost @ EngineError::DeviceLost(_)) => lost.into(),
        _ => error,
    }
}

/// One turn of the event loop (a 20 ms timer).
async fn tick() {
    let tick = Promise::new(&mut |resolve, _| {
        let set_timeout = js_sys::Reflect::get(&js_sys::global(), &"setTimeout".into())
            .ok()
            .and_then(|f| f.dyn_into::<Function>().ok());
        match set_timeout {
            Some(f) => {
                let _ = f.call2(&JsValue::NULL, &resolve, &20.into());
            }
            None => {
                let _ = resolve.call0(&JsValue::NULL);
            }
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(tick).await;
}

/// Streams text pieces to a JS callback; the callback returning `false` stops generation.
fn text_sink(on_text: &Function) -> impl FnMut(&str) -> bool + '_ {
    move |piece: &str| {
        on_text
            .call1(&JsValue::NULL, &JsValue::from_str(piece))
            .map(|keep| keep.as_bool() != Some(false))
            .unwrap_or(false)
    }
}

/// Reports a long prompt's progress to a JS callback as `(done, total)`; the callback
/// returning `false` stops before the first token.
fn progress_sink(on_prompt: &Function) -> impl FnMut(PromptProgress) -> bool + '_ {
    move |p: PromptProgress| {
        on_prompt
            .call2(
                &JsValue::NULL,
                &JsValue::from_f64(p.done as f64),
                &JsValue::from_f64(p.total as f64),
            )
            .map(|keep| keep.as_bool() != Some(false))
            .unwrap_or(false)
    }
}

#[wasm_bindgen]
impl Engine {
    /// Adapter, features, limits, model shape and GPU memory.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        let session = self.session.try_borrow().map_err(|_| busy())?;
        let session = session.as_ref().ok_or_else(unloaded)?;
        Ok(to_js(&session.info)?)
    }

    /// A chat completion: `{ messages, tools?, max_tokens?, temperature?, top_p?, top_k?, seed? }`.
    /// Resolves to a generation result; text pieces go to `on_text` as they are decoded, and
    /// `(done, total)` prompt tokens to `on_prompt` while a long prompt is read (either one
    /// returning `false` stops, with finish reason `abort`).
    pub fn chat(&self, request: JsValue, on_prompt: Function, on_text: Function) -> Promise {
        let session = self.session.clone();
        let gpu = self.gpu.clone();
        future_to_promise(async move {
            let req: ChatRequest = from_js(request, "chat request")?;
            let mut guard = session.try_borrow_mut().map_err(|_| busy())?;
            let s = guard.as_mut().ok_or_else(unloaded)?;
            let request = Request {
                messages: &req.messages,
                tools: &req.tools,
                sampling: req.params.sampling()?,
                max_tokens: req.params.max_tokens()?,
                enable_thinking: req.enable_thinking,
            };
            let completion = match s
                .chat
                .complete_observed(
                    &request,
                    &mut progress_sink(&on_prompt),
                    &mut text_sink(&on_text),
                )
                .await
            {
                Ok(c) => c,
                Err(e) => return Err(lost_or(&gpu, e.into()).await.into()),
            };
            Ok(to_js(&GenerationResult::new(&completion, None))?)
        })
    }

    /// A raw completion: `{ prompt, max_tokens?, … }`, no chat template; the result carries the
    /// generated token ids. Callbacks as for `chat`.
    pub fn complete(&self, request: JsValue, on_prompt: Function, on_text: Function) -> Promise {
        let session = self.session.clone();
        let gpu = self.gpu.clone();
        future_to_promise(async move {
            let req: PromptRequest = from_js(request, "completion request")?;
            let mut guard = session.try_borrow_mut().map_err(|_| busy())?;
            let s = guard.as_mut().ok_or_else(unloaded)?;
            let generated = s
                .chat
                .complete_prompt(
                    &req.prompt,
                    req.params.sampling()?,
                    req.params.max_tokens()?,
                    &mut progress_sink(&on_prompt),
                    &mut text_sink(&on_text),
                )
                .await;
            let (completion, tokens) = match generated {
                Ok(g) => g,
                Err(e) => return Err(lost_or(&gpu, e.into()).await.into()),
            };
            Ok(to_js(&GenerationResult::new(&completion, Some(tokens)))?)
        })
    }

    /// Puts a LoRA adapter on the model, given the bytes of a PEFT adapter's
    /// `adapter_config.json` and `adapter_model.safetensors`, in place of the one in use; both
    /// `null` removes it. Returns the adapter's info (`null` once removed) and forgets the
    /// conversation. An adapter that does not fit the model fails with code `bad-request` and
    /// changes nothing; a GPU failure while applying it leaves the model without an adapter.
    #[wasm_bindgen(js_name = setLora)]
    pub fn set_lora(
        &self,
        config_json: Option<Vec<u8>>,
        safetensors: Option<Vec<u8>>,
    ) -> Result<JsValue, JsValue> {
        let mut guard = self.session.try_borrow_mut().map_err(|_| busy())?;
        let s = guard.as_mut().ok_or_else(unloaded)?;
        let adapter =
            lora::read_adapter(config_json.as_deref(), safetensors.as_deref(), &s.header)?;
        drop((config_json, safetensors));
        match s.chat.model_mut().set_lora(adapter.as_ref()) {
            Ok(()) => s.info.lora = adapter.as_ref().map(lora::info),
            // Checked before anything changed: the model keeps its adapter.
            Err(e @ EngineError::Config(_)) => return Err(lora::apply_error(e).into()),
            Err(e) => {
                s.info.lora = None;
                return Err(lora::apply_error(e).into());
            }
        }
        Ok(to_js(&s.info.lora)?)
    }

    /// Keeps conversations' openings in `store` (none: not kept beyond the conversation).
    #[wasm_bindgen(js_name = setPromptStateStore)]
    pub fn set_prompt_state_store(&self, store: Option<PromptStateStore>) -> Result<(), JsValue> {
        let mut session = self.session.try_borrow_mut().map_err(|_| busy())?;
        let s = session.as_mut().ok_or_else(unloaded)?;
        s.chat
            .set_prefix_store(store.map(|s| Box::new(JsPrefixStore(s)) as Box<dyn PrefixStore>));
        Ok(())
    }

    /// Forgets the cached conversation.
    pub fn reset(&self) -> Result<(), JsValue> {
        let mut session = self.session.try_borrow_mut().map_err(|_| busy())?;
        session.as_mut().ok_or_else(unloaded)?.chat.reset();
        Ok(())
    }

    /// Destroys the engine's GPU device, as a driver reset or the browser reclaiming the GPU
    /// would: a running generation and every later request fail with code `device-lost`
    /// until a model is loaded again. Callable while a request runs (for testing recovery).
    #[wasm_bindgen(js_name = destroyDevice)]
    pub fn destroy_device(&self) {
        self.gpu.destroy();
    }

    /// Frees the model's GPU buffers; later calls fail with code `unloaded`.
    pub fn unload(&self) -> Result<(), JsValue> {
        let mut session = self.session.try_borrow_mut().map_err(|_| busy())?;
        session.take();
        Ok(())
    }
}

fn busy() -> WebError {
    WebError::new("busy", "the engine is still working on another request")
}

fn unloaded() -> WebError {
    WebError::new("unloaded", "the model has been unloaded")
}

/// The machine's memory as the browser tells it (`navigator.deviceMemory`, in GiB, rounded
/// down to a power of two; Chromium's window and workers have it, Firefox and Safari do not).
/// A CPU adapter's buffers live there, and a plan past it kills the browser's GPU process.
fn device_memory() -> Option<u64> {
    let navigator = js_sys::Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    let gib = js_sys::Reflect::get(&navigator, &"deviceMemory".into())
        .ok()?
        .as_f64()?;
    (gib.is_finite() && gib > 0.0).then(|| (gib * f64::from(1u32 << 30)) as u64)
}
