//! Chat sessions on the real SmolLM2: tools described to a template without tool support, and
//! the model's state reused across turns. (`crates/cli/tests/solve.rs` runs the whole agent.)

use lilypad_agent::{LanguageModel, Message, Request, Role, Sampling, ToolCall, parse_reply};
use lilypad_chat::ChatSession;
use lilypad_tests::smollm2_owned;

fn greedy() -> Sampling {
    Sampling {
        temperature: 0.0,
        ..Sampling::default()
    }
}

#[test]
fn each_turn_prefills_only_its_new_tokens() {
    let Some((model, tok)) = smollm2_owned(1024) else {
        return;
    };
    let mut chat = ChatSession::new(model, tok, "SmolLM2").unwrap();
    // One short tool keeps the prompt small on a CPU adapter; the full set runs in the test below.
    let tools = vec![
        serde_json::json!({"type": "function", "function": {"name": "Glob",
        "description": "Find files by pattern.", "parameters": {"type": "object",
        "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}}),
    ];
    let mut messages = vec![
        Message::system("You are a coding agent in /repo."),
        Message::user("What is 2 + 2? Answer with one number."),
    ];
    fn ask<'a>(
        messages: &'a [Message],
        tools: &'a [serde_json::Value],
        max_tokens: usize,
    ) -> Request<'a> {
        Request {
            messages,
            tools,
            sampling: greedy(),
            max_tokens,
            enable_thinking: false,
        }
    }
    let first =
        pollster::block_on(chat.complete(&ask(&messages, &tools, 64), &mut |_| true)).unwrap();
    assert_eq!(
        first.prefilled_tokens, first.prompt_tokens,
        "a fresh session evaluates the whole prompt"
    );
    // SmolLM2's template knows no tools: they are described in the system message.
    let prompt = chat.prompt_text(&ask(&messages, &tools, 64)).unwrap();
    assert!(
        prompt.starts_with("<|im_start|>system\nYou are a coding agent in /repo.\n\n# Tools"),
        "{prompt}"
    );
    assert!(
        prompt.contains("\"name\":\"Glob\"") && prompt.ends_with("<|im_start|>assistant\n"),
        "{prompt}"
    );
    assert_eq!(
        first.finish,
        lilypad_agent::FinishReason::Stop,
        "{:?}",
        first.text
    );

    let reply = parse_reply(&first.text, &tools);
    messages.push(Message {
        role: Role::Assistant,
        content: reply.content,
        reasoning_content: reply.reasoning,
        tool_calls: vec![ToolCall {
            name: "Glob".into(),
            arguments: serde_json::json!({"pattern": "*.py"}),
        }],
        name: None,
    });
    messages.push(Message::tool("Glob", "/repo/a.py\n/repo/test_a.py"));
    let second =
        pollster::block_on(chat.complete(&ask(&messages, &tools, 8), &mut |_| true)).unwrap();
    // Everything the model saw or generated in turn 1 is reused; only the end-of-turn token
    // generated last (sampled, not yet evaluated) and the new messages are evaluated.
    let reused = first.prompt_tokens + first.generated_tokens - 1;
    assert_eq!(second.prefilled_tokens, second.prompt_tokens - reused);
    assert!(
        second.prefilled_tokens < 40,
        "{} new tokens evaluated",
        second.prefilled_tokens
    );
}

/// Qwen3.5's recurrent state cannot be rewound, so reuse across turns must be exact, also
/// after a reply cut off by the token limit: turn 2 evaluates only its new tokens, and what it generates equals a fresh model's greedy
/// continuation of the same tokens evaluated from scratch.
#[test]
fn recurrent_state_carries_across_turns_exactly() {
    use lilypad_engine::SamplingParams;
    use lilypad_tests::qwen::Fixture;
    use lilypad_tokenizer::TextTokenizer;

    let f = Fixture::load("qwen35-tiny");
    let (Some(model), Some(mut fresh)) = (f.model(512, 64), f.model(512, 64)) else {
        return;
    };
    let tok = TextTokenizer::from_gguf(&f.file.metadata).unwrap();
    let mut chat = ChatSession::new(model, tok, "qwen35-tiny").unwrap();
    let mut ask = |messages: &[Message]| -> lilypad_agent::Completion {
        let request = Request {
            messages,
            tools: &[],
            sampling: greedy(),
            max_tokens: 12,
            enable_thinking: false,
        };
        pollster::block_on(chat.complete(&request, &mut |_| true)).unwrap()
    };
    let mut messages = vec![Message::user("The river carried boats of salt.")];
    let first = ask(&messages);
    // Cut off by the token limit: the end-of-turn token the template adds is spliced in.
    assert_eq!(first.finish, lilypad_agent::FinishReason::Length);
    messages.push(Message::new(Role::Assistant, first.text.clone()));
    messages.push(Message::user("Hello"));
    let second = ask(&messages);
    let reused = first.prompt_tokens + first.generated_tokens - 1;
    assert_eq!(second.prefilled_tokens, second.prompt_tokens - reused);

    // The same tokens from scratch on a second model give the same continuation.
    let cached = chat.model().tokens().to_vec();
    let (prompt, generated) = cached.split_at(second.prompt_tokens);
    let sp = SamplingParams::greedy();
    let n = second.generated_tokens;
    let again = pollster::block_on(fresh.generate(prompt, &sp, n, &|_| false, &mut |_| true));
    let again = again.unwrap();
    assert_eq!(again.prompt_evaluated, prompt.len());
    assert_eq!(&again.tokens[..generated.len()], generated);
}
