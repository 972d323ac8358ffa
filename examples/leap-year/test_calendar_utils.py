import pytest

from calendar_utils import days_in_month, days_in_year, is_leap_year


@pytest.mark.parametrize("year", [1996, 2000, 2024, 2400])
def test_leap_years(year):
    assert is_leap_year(year)


@pytest.mark.parametrize("year", [1900, 2023, 2100, 2200])
def test_common_years(year):
    assert not is_leap_year(year)


def test_february():
    assert days_in_month(2000, 2) == 29
    assert days_in_month(1900, 2) == 28


def test_year_lengths():
    assert days_in_year(2024) == 366
    assert days_in_year(2100) == 365


def test_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2024, 13)
