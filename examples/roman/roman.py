"""Roman numerals."""

VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def from_roman(numeral: str) -> int:
    """The value of a Roman numeral such as 'MCMXCIV'."""
    if not numeral:
        raise ValueError("empty numeral")
    total = 0
    for ch in numeral.upper():
        if ch not in VALUES:
            raise ValueError(f"not a Roman digit: {ch!r}")
        total += VALUES[ch]
    return total


def to_roman(value: int) -> str:
    if not 0 < value < 4000:
        raise ValueError("Roman numerals cover 1..3999")
    out = []
    for digit, symbol in [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                          (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]:
        while value >= digit:
            out.append(symbol)
            value -= digit
    return "".join(out)
