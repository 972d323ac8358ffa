import pytest

from roman import from_roman, to_roman


def test_additive():
    assert from_roman("III") == 3
    assert from_roman("LXVI") == 66


def test_subtractive():
    assert from_roman("IV") == 4
    assert from_roman("XC") == 90
    assert from_roman("MCMXCIV") == 1994


def test_round_trip():
    for n in range(1, 400):
        assert from_roman(to_roman(n)) == n


def test_invalid():
    with pytest.raises(ValueError):
        from_roman("ABC")
