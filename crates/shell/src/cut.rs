//! Cutting long text for the model. Command output keeps its start and its end — a build's
//! first error and a test run's summary both matter — with a note of how much went missing.

const MARK_OPEN: &str = "\n\n[... ";
const MARK_CLOSE: &str = " characters cut ...]\n\n";

/// The note left where `chars` characters were taken out.
pub fn cut_note(chars: usize) -> String {
    format!("{MARK_OPEN}{chars}{MARK_CLOSE}")
}

/// Characters that `removed` stood for: its own length, except that a note left by an earlier
/// cut (the shell's capture limit) counts as the characters it replaced.
fn represented(removed: &str) -> usize {
    let mut total = 0;
    let mut rest = removed;
    while let Some(start) = rest.find(MARK_OPEN) {
        total += rest[..start].chars().count();
        let after = &rest[start + MARK_OPEN.len()..];
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        match after[digits..].strip_prefix(MARK_CLOSE) {
            Some(tail) if digits > 0 => {
                total += after[..digits].parse::<usize>().unwrap_or(0);
                rest = tail;
            }
            _ => {
                total += MARK_OPEN.chars().count();
                rest = after;
            }
        }
    }
    total + rest.chars().count()
}

/// `text` if it has at most `max_chars` characters; otherwise its first and last halves of
/// `max_chars` around a [`cut_note`].
pub fn cut_middle(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let head = max_chars / 2;
    let tail = max_chars - head;
    let byte_at = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(i, _)| i)
    };
    let head_end = byte_at(head);
    let tail_start = byte_at(total - tail);
    let removed = &text[head_end..tail_start];
    format!(
        "{}{}{}",
        &text[..head_end],
        cut_note(represented(removed)),
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(cut_middle("héllo", 5), "héllo");
    }

    #[test]
    fn keeps_both_ends_and_counts_the_cut() {
        let text = format!("{}{}{}", "a".repeat(10), "é".repeat(100), "z".repeat(10));
        let cut = cut_middle(&text, 20);
        assert!(cut.starts_with(&"a".repeat(10)), "{cut}");
        assert!(cut.ends_with(&"z".repeat(10)), "{cut}");
        assert!(cut.contains("[... 100 characters cut ...]"), "{cut}");
    }

    #[test]
    fn an_earlier_note_counts_as_what_it_replaced() {
        let text = format!("{}{}{}", "a".repeat(50), cut_note(1000), "z".repeat(50));
        let cut = cut_middle(&text, 20);
        assert!(cut.contains("[... 1080 characters cut ...]"), "{cut}");
        // A bracket that merely looks like a note's start is ordinary text.
        assert_eq!(represented("x\n\n[... y"), 9);
        assert_eq!(represented(&format!("{}!", cut_note(12))), 13);
    }
}
