//! A model's reply: thinking, content and tool calls in both the JSON and the XML forms.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lilypad_agent::{parse_reply, tool_schemas};

fuzz_target!(|data: &[u8]| {
    static TOOLS: OnceLock<Vec<serde_json::Value>> = OnceLock::new();
    let tools = TOOLS.get_or_init(tool_schemas);
    let _ = parse_reply(&String::from_utf8_lossy(data), tools);
});
