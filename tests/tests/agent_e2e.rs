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
