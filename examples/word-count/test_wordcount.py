from wordcount import top_words, words


def test_plain_words():
    assert words("a b  c") == ["a", "b", "c"]


def test_case_and_punctuation():
    assert words("The cat, the hat. THE end!") == ["the", "cat", "the", "hat", "the", "end"]


def test_top_words():
    text = "Red fish, blue fish. Red? Yes: red."
    assert top_words(text, 2) == [("red", 3), ("fish", 2)]


def test_apostrophes_stay_inside_words():
    assert words("don't stop") == ["don't", "stop"]
