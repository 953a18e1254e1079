import math

import pytest

from pptune.report.fmt import fmt_bytes, fmt_over_limit, fmt_pct, fmt_seconds, seconds_unit


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0 s"),
        (0.0123, "12.3 ms"),
        (1.2344, "1.234 s"),
        (85e-6, "85.0 us"),
        (33.0, "33.000 s"),
        (0.001, "1.0 ms"),
        (2.5e-9, "2.5 ns"),
        (0.99996, "1.000 s"),  # rounds up into the next unit, never "1000.0 ms"
        (0.00099996, "1.0 ms"),
        (-0.0123, "-12.3 ms"),
        (math.inf, "inf s"),
    ],
)
def test_fmt_seconds(seconds: float, text: str) -> None:
    assert fmt_seconds(seconds) == text


def test_seconds_unit_matches_fmt() -> None:
    assert seconds_unit(0.0123) == (1e-3, "ms", 1)
    assert seconds_unit(33.0) == (1.0, "s", 3)
    assert seconds_unit(0.0) == (1.0, "s", 3)


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (1.5 * 2**30, "1.50 GiB"),
        (3 * 2**20, "3.00 MiB"),
        (2**40, "1.00 TiB"),
        (2**30 - 1, "1.00 GiB"),  # 1023.999... MiB rounds to 1024.00: next unit
        (-2048, "-2.00 KiB"),
    ],
)
def test_fmt_bytes(nbytes: float, text: str) -> None:
    assert fmt_bytes(nbytes) == text


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.2727272727, "27.3%"), (0.0, "0.0%"), (1.0, "100.0%"), (3 / 11, "27.3%"), (0.2, "20.0%")],
)
def test_fmt_pct(x: float, text: str) -> None:
    assert fmt_pct(x) == text


@pytest.mark.parametrize(
    ("ratio", "limit", "said"),
    [
        (1.1047, 1.10, ("1.105x", "1.10x")),  # 2.462 s over 2.228 s: 1.10x would read as the limit
        (1.17, 1.10, ("1.17x", "1.10x")),  # two decimals show it over: no more
        (1.1004, 1.10, ("1.1004x", "1.10x")),
        (1.1052, 1.105, ("1.1052x", "1.105x")),  # a limit given to three decimals keeps them
        (2.0, 1.0, ("2.00x", "1.00x")),
        (1.10000001, 1.10, ("1.100000x", "1.10x")),  # at most six decimals
    ],
)
def test_a_ratio_over_its_limit_reads_over_it(ratio: float, limit: float,
                                              said: tuple[str, str]) -> None:
    assert fmt_over_limit(ratio, limit) == said
