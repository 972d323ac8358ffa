//! The TypeScript declarations of the types that cross the JS boundary, generated from their
//! Rust definitions so the two sides cannot drift apart: `web/src/lib/wire.ts` (the engine's
//! requests, results and info; the messages, sampling and completions every model user shares)
//! `web/src/agent/wire.ts` (the agent's events, records and settings) and
//! `web/vscode/src/stdio-wire.ts` (`lilypad agent-stdio`'s request and events, for the VS Code
//! extension's native path). This test fails when
//! a file is not what the Rust types say; `LILYPAD_UPDATE_TS=1 cargo test -p lilypad-tests
//! --test typescript` writes them.

use std::path::PathBuf;

use lilypad_wasm::api;
use ts_rs::{Config, TS};

fn header(sources: &str) -> String {
    format!(
        "// Generated from the Rust types in {sources}: do not edit.\n\
         // LILYPAD_UPDATE_TS=1 cargo test -p lilypad-tests --test typescript writes this file again.\n"
    )
}

fn declaration<T: TS>(cfg: &Config) -> String {
    let mut out = String::new();
    if let Some(docs) = T::docs() {
        out.push_str(&docs);
    }
    out.push_str("export ");
    out.push_str(&layout(&T::decl(cfg)));
    out.push('\n');
    out
}

/// The layout a person would write: an object one field per line, each after its doc
/// comment; a union one variant per line. (ts-rs writes each declaration on one line.)
fn layout(decl: &str) -> String {
    let (Some((head, body)), true) = (decl.split_once(" = "), decl.ends_with(';')) else {
        return decl.to_string();
    };
    let body = body.trim_end_matches(';').trim();
    let variants = split_top_level(body, b'|');
    if let [object] = variants.as_slice()
        && let Some(inner) = object_body(object)
    {
        let mut out = format!("{head} = {{\n");
        for field in split_top_level(inner, b',') {
            let (docs, field) = match field.rfind("*/") {
                Some(end) => (&field[..end + 2], field[end + 2..].trim()),
                None => ("", field),
            };
            for line in docs.lines() {
                out.push_str(&format!("  {line}\n"));
            }
            out.push_str(&format!("  {field};\n"));
        }
        return out + "};";
    }
    let lines: Vec<String> = variants
        .iter()
        .map(|v| match object_body(v) {
            Some(inner) => {
                let fields: Vec<String> = split_top_level(inner, b',')
                    .into_iter()
                    .map(one_line)
                    .collect();
                format!("  | {{ {} }}", fields.join("; "))
            }
            None => format!("  | {}", one_line(v)),
        })
        .collect();
    if lines.iter().all(|l| !l.contains("{ ")) {
        return decl.to_string();
    }
    format!("{head} =\n{};", lines.join("\n"))
}

/// `text` on one line, without its doc comments (a union's variants are read at a glance).
fn one_line(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/**") {
        out.push_str(&rest[..start]);
        rest = rest[start..]
            .find("*/")
            .map_or("", |end| &rest[start + end + 2..]);
    }
    out.push_str(rest);
    out.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(", }", " }")
}

/// The fields of `{ ... }`, or None when `text` is not one object.
fn object_body(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('{')?.strip_suffix('}')?;
    // `{ a } | { b }` starts and ends with braces but is not one object.
    (split_top_level(text, b'|').len() == 1).then_some(inner.trim())
}

/// `text` split at `sep` where no bracket is open and outside doc comments; pieces trimmed,
/// empty ones dropped.
fn split_top_level(text: &str, sep: u8) -> Vec<&str> {
    let bytes = text.as_bytes();
    let (mut depth, mut start, mut i, mut out) = (0i32, 0, 0, Vec::new());
    while i < bytes.len() {
        match bytes[i] {
            b'/' if text[i..].starts_with("/**") => {
                i += text[i..].find("*/").map_or(text.len() - i, |e| e + 2);
                continue;
            }
            b'{' | b'<' | b'(' | b'[' => depth += 1,
            b'}' | b'>' | b')' | b']' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(text[start..].trim());
    out.retain(|p| !p.is_empty());
    out
}

/// Every integer is a JSON number on this boundary (sizes fit in 2^53).
fn config() -> Config {
    Config::new().with_large_int("number")
}

fn engine_wire_ts() -> String {
    let cfg = config();
    let declarations = [
        declaration::<lilypad_lm::Role>(&cfg),
        declaration::<lilypad_lm::ToolCall>(&cfg),
        declaration::<lilypad_lm::Message>(&cfg),
        declaration::<lilypad_lm::Sampling>(&cfg),
        declaration::<lilypad_lm::FinishReason>(&cfg),
        declaration::<lilypad_lm::Completion>(&cfg),
        declaration::<api::LoadOptions>(&cfg),
        declaration::<api::GenerationParams>(&cfg),
        declaration::<api::ChatRequest>(&cfg),
        declaration::<api::PromptRequest>(&cfg),
        declaration::<api::StopReason>(&cfg),
        declaration::<api::Usage>(&cfg),
        declaration::<api::Timings>(&cfg),
        declaration::<api::GenerationResult>(&cfg),
        declaration::<api::UploadProgress>(&cfg),
        declaration::<api::LoraInfo>(&cfg),
        declaration::<api::AdapterInfo>(&cfg),
        declaration::<api::ModelInfo>(&cfg),
        declaration::<api::EngineInfo>(&cfg),
        declaration::<api::HeaderInfo>(&cfg),
    ];
    format!(
        "{}\n{}",
        header("crates/wasm/src/api.rs and crates/lm"),
        declarations.join("\n")
    )
}

fn agent_wire_ts() -> String {
    use lilypad_agent::{AgentConfig, CallRecord, Exit, Observation, StepRecord, Trajectory};
    let cfg = config();
    let declarations = [
        declaration::<Observation>(&cfg),
        declaration::<CallRecord>(&cfg),
        declaration::<StepRecord>(&cfg),
        declaration::<Exit>(&cfg),
        declaration::<AgentConfig>(&cfg),
        declaration::<Trajectory>(&cfg),
        declaration::<lilypad_agent_wasm::PageEvent<'_>>(&cfg),
    ];
    format!(
        "{}import type {{ FinishReason, Message, Sampling, ToolCall }} from '../lib/wire';\n\n{}",
        header("crates/agent and crates/agent-wasm/src/events.rs"),
        declarations.join("\n")
    )
}

fn stdio_wire_ts() -> String {
    use lilypad_cli::stdio_protocol::*;
    let cfg = config();
    let declarations = [
        declaration::<FileSpec>(&cfg),
        declaration::<RepoSpec>(&cfg),
        declaration::<ModelSpec>(&cfg),
        declaration::<Settings>(&cfg),
        declaration::<Request>(&cfg),
        declaration::<FileResult>(&cfg),
        declaration::<ErrorCode>(&cfg),
        declaration::<Event>(&cfg),
    ];
    format!(
        "{}import type {{ Exit, Trajectory }} from '../../src/agent/wire';\n\n{}",
        header("crates/cli/src/stdio_protocol.rs"),
        declarations.join("\n")
    )
}

#[test]
fn the_wire_types_are_generated_from_the_rust_types() {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web/src");
    let update = std::env::var_os("LILYPAD_UPDATE_TS").is_some();
    for (path, expected) in [
        (web.join("lib/wire.ts"), engine_wire_ts()),
        (web.join("agent/wire.ts"), agent_wire_ts()),
        (web.join("../vscode/src/stdio-wire.ts"), stdio_wire_ts()),
    ] {
        if update {
            std::fs::write(&path, &expected).unwrap();
            continue;
        }
        let found = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            found == expected,
            "{} is not what the Rust types declare: run \
             LILYPAD_UPDATE_TS=1 cargo test -p lilypad-tests --test typescript",
            path.display()
        );
    }
}
