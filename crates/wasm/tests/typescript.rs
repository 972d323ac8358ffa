//! `web/src/lib/wire.ts` holds the TypeScript declarations of the types that cross the JS
//! boundary (requests, results, engine info, the agent's messages and completions), generated
//! from their Rust definitions so the two sides cannot drift apart. This test fails when the
//! file is not what the Rust types say; `LILYPAD_UPDATE_TS=1 cargo test -p lilypad-wasm --test
//! typescript` writes it.

use std::path::PathBuf;

use lilypad_wasm::api;
use ts_rs::{Config, TS};

const HEADER: &str = "\
// Generated from the Rust types in crates/wasm/src/api.rs and crates/lm: do not edit.
// LILYPAD_UPDATE_TS=1 cargo test -p lilypad-wasm --test typescript writes this file again.
";

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

/// One field per line, each after its doc comment: `type X = { a: A, /** doc */ b: B, };`
/// as ts-rs writes it becomes the layout a person would write.
fn layout(decl: &str) -> String {
    let (Some(open), Some(body)) = (decl.find("= { "), decl.strip_suffix(" };")) else {
        return decl.to_string();
    };
    let body = &body[open + 4..];
    let mut fields = Vec::new();
    let (mut depth, mut start, mut i) = (0i32, 0, 0);
    let bytes = body.as_bytes();
    while i < bytes.len() {
        match bytes[i] {
            // Commas in doc comments do not end a field.
            b'/' if body[i..].starts_with("/**") => {
                i += body[i..].find("*/").map_or(body.len() - i, |e| e + 2);
                continue;
            }
            b'{' | b'<' | b'(' | b'[' => depth += 1,
            b'}' | b'>' | b')' | b']' => depth -= 1,
            b',' if depth == 0 => {
                fields.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    let mut out = format!("{}= {{\n", &decl[..open]);
    for field in fields.iter().chain([&body[start..].trim()]) {
        if field.is_empty() {
            continue;
        }
        let (docs, field) = match field.rfind("*/") {
            Some(end) => (&field[..end + 2], field[end + 2..].trim()),
            None => ("", *field),
        };
        for line in docs.lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&format!("  {field};\n"));
    }
    out.push_str("};");
    out
}

fn wire_ts() -> String {
    // Every integer is a JSON number on this boundary (sizes fit in 2^53).
    let cfg = Config::new().with_large_int("number");
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
    format!("{HEADER}\n{}", declarations.join("\n"))
}

#[test]
fn wire_ts_is_generated_from_the_rust_types() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../web/src/lib/wire.ts");
    let expected = wire_ts();
    if std::env::var_os("LILYPAD_UPDATE_TS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    let found = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        found == expected,
        "{} is not what the Rust types declare: run \
         LILYPAD_UPDATE_TS=1 cargo test -p lilypad-wasm --test typescript",
        path.display()
    );
}
