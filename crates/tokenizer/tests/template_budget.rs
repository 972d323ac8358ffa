//! Chat templates come from model files, so a render has a budget: hostile templates run out
//! of it quickly instead of out of memory, while every real template llama.cpp ships renders a
//! long agent conversation well within it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lilypad_tokenizer::{
    ChatTemplate, MAX_TEXT_BYTES, TEMPLATE_FUEL, TemplateValue, TokenizerError,
};
use serde::Serialize;

#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: String,
}

fn render(source: &str, messages: &[Message]) -> Result<String, TokenizerError> {
    ChatTemplate::new(source, "<s>", "</s>")?.render(messages, true, TemplateValue::UNDEFINED)
}

#[test]
fn hostile_templates_run_out_of_budget() {
    let hi = [Message {
        role: "user",
        content: "hi".into(),
    }];
    for source in [
        // 10^10 iterations.
        "{% for i in range(100000) %}{% for j in range(100000) %}{% set k = j %}{% endfor %}{% endfor %}",
        // A string doubled 40 times: a terabyte.
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        // 100 MB strings repeated without end.
        "{% for i in range(100000) %}{% set s = 'x' * 100000000 %}{% endfor %}",
    ] {
        let start = Instant::now();
        let err = render(source, &hi).unwrap_err();
        assert!(
            matches!(err, TokenizerError::TemplateBudget { .. }),
            "{source}: {err}"
        );
        assert!(err.to_string().contains("budget"), "{err}");
        // A bound on the work, not a timing: without the budget these run for hours.
        assert!(start.elapsed() < Duration::from_secs(60), "{source}");
    }
}

#[test]
fn output_past_the_tokenizer_limit_stops_the_render() {
    let hi = [Message {
        role: "user",
        content: "hi".into(),
    }];
    // 200 MB of prompt: with a 160-byte-per-character tokenizer behind it, this took all of a
    // 23 GB machine.
    let err = render("{{ 'x'*100000000 }}{{ 'y'*100000000 }}", &hi).unwrap_err();
    assert!(
        matches!(err, TokenizerError::RenderedTooLong { limit } if limit == MAX_TEXT_BYTES),
        "{err}"
    );
}

/// llama.cpp's `models/templates` folder from the sdist that `scripts/llama-cpp/build.sh
/// --vectors-only` fetches, or `None` when it has not been fetched.
fn templates_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("LILYPAD_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lilypad")))?;
    let dir = cache
        .join("llama.cpp-0.3.36/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates");
    if dir.join("Qwen3.5-4B.jinja").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var("LILYPAD_REQUIRE_MODEL").as_deref() != Ok("1"),
        "{} is missing: run scripts/llama-cpp/build.sh --vectors-only",
        dir.display()
    );
    eprintln!("skipping: {} is missing", dir.display());
    None
}

#[test]
fn real_templates_render_a_long_conversation_within_budget() {
    let Some(dir) = templates_dir() else { return };
    // A long agent run: 120 turns, 1 MiB of file contents and command output in all (about
    // 250k tokens, the longest context of the models lilypad runs).
    let block = "def f(x):\n    return x + 1  # a line of code\n".repeat(200);
    let mut messages = vec![Message {
        role: "system",
        content: "You are a coding agent.".into(),
    }];
    for i in 0..120 {
        messages.push(Message {
            role: if i % 2 == 0 { "user" } else { "assistant" },
            content: format!("turn {i}\n{block}"),
        });
    }
    let bytes: usize = messages.iter().map(|m| m.content.len()).sum();
    assert!(bytes > 1 << 20, "{bytes}");
    let mut fuel = Vec::new();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jinja") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let rendered = ChatTemplate::new(&source, "<s>", "</s>")
            .and_then(|t| t.render_counting_fuel(&messages, true, TemplateValue::UNDEFINED));
        match rendered {
            Ok((text, used)) => {
                assert!(text.len() >= bytes, "{name}: the messages are all there");
                fuel.push((used, name.clone()));
            }
            // Templates may refuse this conversation's shape (roles, alternation) or use
            // syntax minijinja lacks; only the budget is under test here.
            Err(TokenizerError::TemplateBudget { .. }) => panic!("{name} ran out of budget"),
            Err(_) => {}
        }
        names.push(name);
    }
    assert!(names.iter().any(|n| n == "Qwen3.5-4B.jinja"));
    assert!(
        fuel.len() * 2 > names.len(),
        "most templates render: {} of {}",
        fuel.len(),
        names.len()
    );
    fuel.sort();
    let (most, name) = fuel.last().unwrap();
    eprintln!(
        "{} of {} templates rendered {bytes} bytes of messages; most fuel: {name}, {most} of {TEMPLATE_FUEL}",
        fuel.len(),
        names.len()
    );
    let qwen = fuel.iter().find(|(_, n)| n == "Qwen3.5-4B.jinja").unwrap();
    eprintln!("Qwen3.5-4B.jinja: {} fuel", qwen.0);
}
