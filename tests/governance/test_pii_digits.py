"""find_pii skips the detectors a text has too few digits for: it finds what it found when
every detector ran on every text."""

from __future__ import annotations

import random

import pytest

from governance import pii

SAMPLES = [
    "alice@example.com",
    "+44 20 7946 0958",
    "(415) 555-2671",
    "4111 1111 1111 1111",
    "378282246310005",
    "GB82 WEST 1234 5698 7654 32",
    "NO9386011117947",
    "078-05-1120",
    "12345678Z",
    "RSSMRA85T10A562S",
    "123.456.789-09",
    "046 454 286",
    "192.168.0.1",
    "::ffff:192.0.2.1",
    "2001:db8::1",
    "version 1.2.3.4",
    "١٢٣٤٥٦٧٨٩٠",  # Arabic-Indic digits
    "５５５-１２３-４５６７",  # full-width digits
    "²³¹⁴⁵⁶⁷",  # superscripts: digits to str.isdigit, not to \d
]
FILLER = ["hello", " ", "\n", "é", "-", ".", ":", "A", "Z9", "12", "7", "@", "ab::cd", '"n": 7']


def _every_detector(text: str, region: str) -> list[pii.PiiSpan]:
    """find_pii as it was: each detector on every text."""
    taken: list[pii.PiiSpan] = []
    for detector, _ in pii._DETECTORS:
        for found in detector(text):
            if not pii._overlaps(found, taken):
                taken.append(found)
    for found in pii._phones(text, region):
        if not pii._overlaps(found, taken):
            taken.append(found)
    return sorted(taken)


@pytest.mark.parametrize("text", SAMPLES)
def test_it_finds_each_sample_as_every_detector_does(text: str) -> None:
    assert pii.find_pii(text) == _every_detector(text, "US")


def test_it_finds_what_every_detector_finds_in_mixed_text() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        pieces = [rng.choice(SAMPLES if rng.random() < 0.3 else FILLER) for _ in range(6)]
        text = rng.choice(["", " "]).join(pieces)
        region = rng.choice(["US", "GB"])
        assert pii.find_pii(text, region=region) == _every_detector(text, region), text


def test_it_counts_digits_as_str_isdigit_does() -> None:
    for text in ["", "abc", "a1b22", "١٢٣", "²x3", "５５５"]:
        assert pii._digit_count(text) == sum(char.isdigit() for char in text)
