"""Word frequencies for short texts."""

from collections import Counter


def words(text: str) -> list[str]:
    """The words of `text`, lower-cased, without surrounding punctuation."""
    return [w for w in text.split() if w]


def top_words(text: str, n: int = 3) -> list[tuple[str, int]]:
    """The `n` most frequent words, most frequent first; ties in alphabetical order."""
    counts = Counter(words(text))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
