//! A conversation's opening computed once, ever: SmolLM2 evaluates a system prompt with tool
//! schemas, a new session on a freshly loaded model starts from the saved state and answers
//! exactly as the first did while evaluating only the rest of the prompt; a damaged saved
//! state is computed again, never used. States carry the weights' and adapter's key: another
//! model, or the same one with an adapter, refuses them, and corrupt bytes are typed errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lilypad_chat::{ChatSession, PrefixStore};
use lilypad_engine::{EngineError, Logits, Model};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_lm::{Completion, FinishReason, Message, ProgressSink, Request, Sampling};
use lilypad_tests::qwen::{load_model, options};
use lilypad_tests::{repo_root, smollm2_owned};

#[derive(Clone, Default)]
struct SharedStore(Arc<Mutex<HashMap<String, Vec<u8>>>>);

impl PrefixStore for SharedStore {
    fn load(&mut self, key: &str) -> Option<Vec<u8>> {
        self.0.lock().unwrap().get(key).cloned()
    }
    fn save(&mut self, key: &str, state: &[u8]) {
        self.0.lock().unwrap().insert(key.into(), state.to_vec());
    }
}

fn ask(store: &SharedStore) -> Option<Completion> {
    let (model, tok) = smollm2_owned(1024)?;
    let mut session = ChatSession::new(model, tok, "smollm2").unwrap();
    ask_in(&mut session, store, &mut |_| true)
}

fn ask_in(
    session: &mut ChatSession,
    store: &SharedStore,
    on_prompt: &mut ProgressSink<'_>,
) -> Option<Completion> {
    session.set_prefix_store(Some(Box::new(store.clone())));
    let tools = vec![serde_json::json!({
        "type": "function",
        "function": {
            "name": "Read",
            "description": "Read a file of the repository, with line numbers.",
            "parameters": {
                "type": "object",
                "properties": { "path": { "type": "string" } },
                "required": ["path"]
            }
        }
    })];
    let messages = [
        Message::system(
            "You are a careful coding assistant. Answer briefly. Use the tools to look at files before you change them.",
        ),
        Message::user("What is the capital of France?"),
    ];
    let req = Request {
        messages: &messages,
        tools: &tools,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        max_tokens: 12,
        enable_thinking: false,
    };
    Some(pollster::block_on(session.complete_observed(&req, on_prompt, &mut |_| true)).unwrap())
}

#[test]
fn a_stop_while_the_opening_is_read_saves_nothing_and_loses_nothing() {
    let Some((model, tok)) = smollm2_owned(1024) else {
        return;
    };
    let mut session = ChatSession::new(model, tok, "smollm2").unwrap();
    let store = SharedStore::default();
    let mut reports = Vec::new();
    let stopped = ask_in(&mut session, &store, &mut |p| {
        reports.push(p);
        false
    })
    .unwrap();
    assert_eq!(stopped.finish, FinishReason::Aborted);
    assert_eq!((stopped.text.as_str(), stopped.generated_tokens), ("", 0));
    assert_eq!(reports.len(), 1, "stopped at the first report");
    assert_eq!(reports[0].total, stopped.prompt_tokens);
    assert!(reports[0].done < stopped.prompt_tokens);
    assert!(
        store.0.lock().unwrap().is_empty(),
        "a partial opening is not saved"
    );

    // Asked again in the same session: it goes on from what was read, saves the opening,
    // and answers as a session that was never stopped.
    let mut reports = Vec::new();
    let done = ask_in(&mut session, &store, &mut |p| {
        reports.push(p);
        true
    })
    .unwrap();
    assert_eq!(store.0.lock().unwrap().len(), 1);
    assert_eq!(
        done.prefilled_tokens,
        done.prompt_tokens - stopped.prefilled_tokens,
        "only what the stopped request had not read"
    );
    let whole = ask(&SharedStore::default()).unwrap();
    assert_eq!(done.text, whole.text);
    assert_eq!(done.finish, whole.finish);
    let last = reports.last().unwrap();
    assert_eq!(last.done, last.total);
    assert!(reports.windows(2).all(|w| w[0].done <= w[1].done));
}

#[test]
fn a_new_session_starts_from_the_saved_opening() {
    let store = SharedStore::default();
    let Some(cold) = ask(&store) else { return };
    assert_eq!(cold.prefilled_tokens, cold.prompt_tokens);
    let saved: Vec<(String, usize)> = store
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.len()))
        .collect();
    assert_eq!(saved.len(), 1, "one opening saved");
    eprintln!("saved state: {} bytes", saved[0].1);

    let warm = ask(&store).unwrap();
    assert_eq!(
        warm.text, cold.text,
        "the same greedy answer from the saved state"
    );
    assert!(
        warm.prefilled_tokens < cold.prefilled_tokens / 2,
        "only the rest of the prompt is evaluated: {} of {}",
        warm.prefilled_tokens,
        warm.prompt_tokens
    );
    eprintln!(
        "cold: {} tokens in {:.0} ms; from the saved opening: {} tokens in {:.0} ms",
        cold.prefilled_tokens, cold.prefill_ms, warm.prefilled_tokens, warm.prefill_ms
    );

    // A damaged state (cut short) is not used: the opening is evaluated and saved again.
    for state in store.0.lock().unwrap().values_mut() {
        state.truncate(state.len() / 2);
    }
    let again = ask(&store).unwrap();
    assert_eq!(again.text, cold.text);
    assert_eq!(again.prefilled_tokens, again.prompt_tokens);
    let lens: Vec<usize> = store.0.lock().unwrap().values().map(Vec::len).collect();
    assert_eq!(lens, [saved[0].1], "saved whole again");
}

fn tiny_llama() -> Option<Model> {
    let path = repo_root().join("tests/fixtures/lora/llama-tiny/model/model.gguf");
    let src = MmapSource::open(path).unwrap();
    let file = GgufFile::read(&src).unwrap();
    load_model(&file, &src, &options(64, 16))
}

#[test]
fn a_state_loads_only_into_the_weights_that_made_it() {
    let Some(mut a) = tiny_llama() else { return };
    let tokens = [5u32, 9, 2, 77, 31, 4];
    let logits = pollster::block_on(a.eval(&tokens, Logits::Last)).unwrap();
    let state = pollster::block_on(a.save_state()).unwrap();

    // The same weights, loaded again, continue as if they had evaluated the tokens.
    let mut b = tiny_llama().unwrap();
    b.load_state(&state).unwrap();
    assert_eq!(b.tokens(), tokens);
    let next = pollster::block_on(b.eval(&[12], Logits::Last)).unwrap();
    let want = pollster::block_on(a.eval(&[12], Logits::Last)).unwrap();
    assert_eq!(next, want);
    assert_ne!(logits, want);

    // Other weights: SmolLM2 refuses the tiny Llama's state by its key.
    if let Some((mut smol, _)) = smollm2_owned(64) {
        let err = smol.load_state(&state).unwrap_err();
        assert!(matches!(err, EngineError::State(_)), "{err}");
        assert!(smol.tokens().is_empty());
    }

    // Every cut and a flipped byte in the counts are typed errors, never a panic.
    let mut c = tiny_llama().unwrap();
    for cut in (0..state.len()).step_by(state.len() / 97 + 1) {
        let err = c.load_state(&state[..cut]).unwrap_err();
        assert!(matches!(err, EngineError::State(_)), "cut at {cut}: {err}");
    }
    let mut longer = state.clone();
    longer.push(0);
    assert!(matches!(c.load_state(&longer), Err(EngineError::State(_))));
    assert!(
        c.tokens().is_empty(),
        "a refused state leaves the model as it was"
    );
}
