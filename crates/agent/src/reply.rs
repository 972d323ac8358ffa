//! Reading the model's reply: thinking, visible text and tool calls. Qwen models write calls as
//! Hermes-style JSON (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`); Qwen3.5-family
//! templates also show an XML form (`<function=NAME><parameter=P>value</parameter></function>`),
//! so both are accepted. A malformed call becomes an error the agent reports back to the model.

use serde_json::{Map, Value};

use crate::ToolCall;

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub reasoning: Option<String>,
    /// The text outside thinking and tool calls, trimmed.
    pub content: String,
    /// One entry per `<tool_call>` block, in order: the call, or why it could not be read.
    pub calls: Vec<Result<ToolCall, String>>,
}

/// Splits `text` into thinking, content and tool calls. `tools` (OpenAI-style function schemas)
/// types the XML form's parameters, whose values are plain text.
pub fn parse_reply(text: &str, tools: &[Value]) -> Reply {
    let (reasoning, rest) = split_thinking(text);
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = rest;
    while let Some(start) = rest.find(CALL_OPEN) {
        content.push_str(&rest[..start]);
        let after = &rest[start + CALL_OPEN.len()..];
        let (body, next, closed) = match after.find(CALL_CLOSE) {
            Some(end) => (&after[..end], &after[end + CALL_CLOSE.len()..], true),
            // A reply cut off inside a call still gets a precise error.
            None => (after, "", false),
        };
        let n = calls.len() + 1;
        calls.push(
            parse_call(body, tools)
                .and_then(|c| {
                    if closed {
                        Ok(c)
                    } else {
                        Err(format!("missing {CALL_CLOSE}"))
                    }
                })
                .map_err(|e| format!("tool call {n} could not be read: {e}")),
        );
        rest = next;
    }
    content.push_str(rest);
    Reply {
        reasoning,
        content: content.trim().to_string(),
        calls,
    }
}

fn split_thinking(text: &str) -> (Option<String>, &str) {
    // With thinking on, the prompt already ends in `<think>`, so the reply may start inside it.
    if let Some(end) = text.find(THINK_CLOSE) {
        let head = &text[..end];
        let head = head
            .find(THINK_OPEN)
            .map_or(head, |i| &head[i + THINK_OPEN.len()..]);
        return (
            Some(head.trim().to_string()),
            &text[end + THINK_CLOSE.len()..],
        );
    }
    if let Some(start) = text.find(THINK_OPEN)
        && text[..start].trim().is_empty()
    {
        return (
            Some(text[start + THINK_OPEN.len()..].trim().to_string()),
            "",
        );
    }
    (None, text)
}

fn parse_call(body: &str, tools: &[Value]) -> Result<ToolCall, String> {
    let body = body.trim();
    if body.starts_with("<function=") {
        return parse_xml_call(body, tools);
    }
    let value: Value = serde_json::from_str(body).map_err(|e| {
        format!("invalid JSON ({e}); write {{\"name\": \"Tool\", \"arguments\": {{...}}}}")
    })?;
    let Value::Object(mut obj) = value else {
        return Err("expected a JSON object with \"name\" and \"arguments\"".into());
    };
    let name = match obj.remove("name") {
        Some(Value::String(s)) if !s.is_empty() => s,
        _ => return Err("missing \"name\" (a string)".into()),
    };
    let arguments = match obj.remove("arguments").or_else(|| obj.remove("parameters")) {
        None => Value::Object(Map::new()),
        Some(Value::Object(m)) => Value::Object(m),
        // Some models encode the arguments as a JSON string, as OpenAI's API does.
        Some(Value::String(s)) => match serde_json::from_str(&s) {
            Ok(Value::Object(m)) => Value::Object(m),
            _ => return Err("\"arguments\" must be a JSON object".into()),
        },
        Some(_) => return Err("\"arguments\" must be a JSON object".into()),
    };
    Ok(ToolCall { name, arguments })
}

fn parse_xml_call(body: &str, tools: &[Value]) -> Result<ToolCall, String> {
    let rest = &body["<function=".len()..];
    let close = rest.find('>').ok_or("unterminated <function=NAME>")?;
    let name = rest[..close].trim().to_string();
    if name.is_empty() {
        return Err("empty function name".into());
    }
    let mut rest = &rest[close + 1..];
    let mut args = Map::new();
    while let Some(start) = rest.find("<parameter=") {
        let after = &rest[start + "<parameter=".len()..];
        let close = after.find('>').ok_or("unterminated <parameter=NAME>")?;
        let pname = after[..close].trim().to_string();
        let value_and_rest = &after[close + 1..];
        let end = value_and_rest
            .find("</parameter>")
            .ok_or_else(|| format!("parameter `{pname}` has no </parameter>"))?;
        let raw = value_and_rest[..end]
            .strip_prefix('\n')
            .unwrap_or(&value_and_rest[..end]);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        args.insert(pname.clone(), typed_param(&name, &pname, raw, tools));
        rest = &value_and_rest[end + "</parameter>".len()..];
    }
    if !rest.contains("</function>") {
        return Err("missing </function>".into());
    }
    Ok(ToolCall {
        name,
        arguments: Value::Object(args),
    })
}

/// Converts an XML parameter's text to the type its schema declares; text stays text.
fn typed_param(tool: &str, param: &str, raw: &str, tools: &[Value]) -> Value {
    let ty = tools
        .iter()
        .map(|t| t.get("function").unwrap_or(t))
        .find(|f| f.get("name").and_then(Value::as_str) == Some(tool))
        .and_then(|f| f.pointer(&format!("/parameters/properties/{param}/type")))
        .and_then(Value::as_str);
    match ty {
        Some("integer" | "number" | "boolean" | "object" | "array") => {
            serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.into()))
        }
        _ => Value::String(raw.into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schemas() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "Read", "parameters": {"type": "object",
            "properties": {"file_path": {"type": "string"}, "offset": {"type": "integer"}}}}}),
        ]
    }

    #[test]
    fn json_calls_with_thinking_and_text() {
        let r = parse_reply(
            "Let me look.\n</think>\n\nI'll read it.\n<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"/repo/a.py\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"Glob\", \"arguments\": \"{\\\"pattern\\\": \\\"*.py\\\"}\"}\n</tool_call>",
            &[],
        );
        assert_eq!(r.reasoning.as_deref(), Some("Let me look."));
        assert_eq!(r.content, "I'll read it.");
        assert_eq!(
            r.calls,
            vec![
                Ok(ToolCall {
                    name: "Read".into(),
                    arguments: json!({"file_path": "/repo/a.py"})
                }),
                Ok(ToolCall {
                    name: "Glob".into(),
                    arguments: json!({"pattern": "*.py"})
                }),
            ]
        );
    }

    #[test]
    fn xml_calls_are_typed_by_schema() {
        let r = parse_reply(
            "<think>\nhmm\n</think>\n<tool_call>\n<function=Read>\n<parameter=file_path>\n/repo/a.py\n</parameter>\n<parameter=offset>\n10\n</parameter>\n</function>\n</tool_call>",
            &schemas(),
        );
        assert_eq!(r.reasoning.as_deref(), Some("hmm"));
        assert_eq!(r.content, "");
        assert_eq!(
            r.calls,
            vec![Ok(ToolCall {
                name: "Read".into(),
                arguments: json!({"file_path": "/repo/a.py", "offset": 10})
            })]
        );
    }

    #[test]
    fn plain_answer_has_no_calls() {
        let r = parse_reply("The bug is fixed.", &[]);
        assert_eq!(
            (r.reasoning, r.content.as_str(), r.calls.len()),
            (None, "The bug is fixed.", 0)
        );
        let cut = parse_reply("<think>\nstill thinking", &[]);
        assert_eq!(cut.reasoning.as_deref(), Some("still thinking"));
    }

    #[test]
    fn malformed_calls_become_errors() {
        for (text, needle) in [
            (
                "<tool_call>{\"name\": \"Read\", \"arguments\": {</tool_call>",
                "invalid JSON",
            ),
            ("<tool_call>[1, 2]</tool_call>", "JSON object"),
            (
                "<tool_call>{\"arguments\": {}}</tool_call>",
                "missing \"name\"",
            ),
            (
                "<tool_call>{\"name\": \"Read\", \"arguments\": 3}</tool_call>",
                "must be a JSON object",
            ),
            (
                "<tool_call>{\"name\": \"Read\", \"arguments\": {}}",
                "missing </tool_call>",
            ),
            (
                "<tool_call><function=Read><parameter=x>1</function></tool_call>",
                "no </parameter>",
            ),
            (
                "<tool_call><function=Read></tool_call>",
                "missing </function>",
            ),
        ] {
            let r = parse_reply(text, &[]);
            assert_eq!(r.calls.len(), 1, "{text}");
            let err = r.calls[0].as_ref().unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn arbitrary_text_never_panics() {
        let pieces = [
            "<tool_call>",
            "</tool_call>",
            "<think>",
            "</think>",
            "{",
            "}",
            "\"name\"",
            ":",
            "<function=",
            ">",
            "<parameter=",
            "</parameter>",
            "</function>",
            "é",
            "\n",
        ];
        let mut state = 0x1234_5678_u64;
        for _ in 0..5000 {
            let mut s = String::new();
            for _ in 0..12 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                s.push_str(pieces[(state >> 33) as usize % pieces.len()]);
            }
            let _ = parse_reply(&s, &schemas());
        }
    }
}
