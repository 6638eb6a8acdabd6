"""Parsing byte sizes (pydantic's ByteSize) and the one set of formatters."""

import math

import pandas as pd
import pytest

from analysis.units import fmt_bandwidth, fmt_bytes, fmt_ms, fmt_number, fmt_pct, fmt_seconds, parse_bytes


@pytest.mark.parametrize("text,expected", [
    ("16MiB", 16 * 1024 * 1024),  # 16,777,216: binary units are powers of 1024
    ("16MB", 16_000_000),  # decimal units are powers of 1000
    ("512 MiB", 536_870_912),
    ("1.5GiB", 1_610_612_736),  # 1.5 × 1,073,741,824
    ("4096", 4096),
    (2_000_000_000, 2_000_000_000),
])
def test_byte_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["sixteen MiB", "16 furlongs", "-3GiB", "", True])
def test_bad_byte_sizes_are_named(bad):
    with pytest.raises(ValueError, match="is not a byte count") as err:
        parse_bytes(bad)
    assert repr(bad) in str(err.value)


def test_one_formatter_per_quantity_and_missing_is_a_dash():
    assert fmt_bytes(3 * 2**40) == "3.00 TiB" and fmt_bytes(1.5 * 2**30) == "1.50 GiB" and fmt_bytes(100) == "100 B"
    assert fmt_seconds(0.0042) == "4.200 ms" and fmt_seconds(88.08e-6) == "88.08 µs" and fmt_seconds(2) == "2.000 s"
    assert fmt_ms(1.5) == "1,500.000 ms"  # a column keeps one unit
    assert fmt_pct(0.031) == "+3.1%" and fmt_bandwidth(3.35e12) == "3,350.0 GB/s"
    assert fmt_number(1234567) == "1,234,567" and fmt_number(0.123456) == "0.123" and fmt_number(True) == "yes"
    for gone in (None, math.nan, pd.NA):
        assert {fmt_bytes(gone), fmt_seconds(gone), fmt_ms(gone), fmt_pct(gone), fmt_number(gone),
                fmt_bandwidth(gone)} == {"—"}


def test_the_report_formats_through_the_same_functions():
    from analysis.table import fbytes, fms

    # One formatter: the PDF's tables say 3.00 TiB as the CLI does (not "3,072.00 GiB").
    assert fbytes(3 * 2**40) == fmt_bytes(3 * 2**40) == "3.00 TiB"
    assert fms(0.0042) == "4.200 ms"


def test_a_huge_duration_is_named_in_a_short_line():
    from analysis.units import parse_seconds

    with pytest.raises(ValueError) as exc:
        parse_seconds("9" * 100_000)
    assert len(str(exc.value)) < 120 and "(100,000 characters)" in str(exc.value)
