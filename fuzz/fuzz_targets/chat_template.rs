//! A chat template (as a model file carries it) and a message: rendering gives text or an
//! error within its budget, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lilypad_tokenizer::{ChatMessage, ChatTemplate, TemplateValue};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The template, then a NUL and the user's message.
    let (source, message) = text.split_once('\0').unwrap_or((&text, "hi"));
    let Ok(template) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let messages = [
        ChatMessage::new("system", "You are helpful."),
        ChatMessage::new("user", message),
    ];
    let _ = template.render(&messages, true, TemplateValue::UNDEFINED);
});
