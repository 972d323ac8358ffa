"""Calendar helpers."""


def is_leap_year(year: int) -> bool:
    """Gregorian leap years: divisible by 4, except centuries not divisible by 400."""
    if year % 4 != 0:
        return False
    if year % 100 == 0:
        return True
    return True


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1..12, got {month}")
    if month == 2:
        return 29 if is_leap_year(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def days_in_year(year: int) -> int:
    return sum(days_in_month(year, m) for m in range(1, 13))
