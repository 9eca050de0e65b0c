"""Personal data in free text: where it is and what kind it is. Pure Python, no Django.

`find_pii(text, region=...)` returns the spans of:

- EMAIL: a regular expression (local part, @, a dotted domain with a 2-63 letter TLD);
- PHONE: `phonenumbers.PhoneNumberMatcher` at leniency VALID: numbers written with a `+`
  country code from any country, national-format numbers of `region` (default US);
- CREDIT_CARD: 13-19 digits (grouped 4-4-4-4, 4-6-5 or contiguous) with a card network's
  prefix and a valid Luhn check digit (`stdnum.luhn`);
- IBAN: `stdnum.iban`, the country's format and the mod-97 check, compact or in groups of four;
- SSN: a US Social Security number written 123-45-6789, checked by `stdnum.us.ssn` (no 000,
  666 or 9xx area, none of the numbers published in advertising);
- NATIONAL_ID: a Spanish DNI, an Italian codice fiscale, a Brazilian CPF (written
  123.456.789-09) or a Canadian SIN (written 123-456-782 or 123 456 782), each with its check
  digit verified by `stdnum`; `detail` says which (`es.dni`, `it.codicefiscale`, `br.cpf`,
  `ca.sin`);
- IP_ADDRESS: IPv4 and IPv6 addresses the `ipaddress` module accepts (an IPv6 address with
  at least one digit, so that `abc::def` stays a name).

What it does not find: names, postal addresses, dates of birth, passport numbers, bare
9-digit SSNs (too many other numbers look the same), national-format phone numbers of other
countries than `region`, lower-case IBANs. Version strings shaped like an IPv4 address
(`version 1.2.3.4`) are reported as IP addresses.

A span is reported once: where detectors overlap, the most specific wins, in the order EMAIL,
IBAN, CREDIT_CARD, SSN, NATIONAL_ID, IP_ADDRESS, PHONE (an e-mail address before the phone
number in its local part, an IBAN or a card number before a phone number its digits spell).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import NamedTuple

import phonenumbers
from stdnum import iban, luhn
from stdnum.br import cpf
from stdnum.ca import sin
from stdnum.es import dni
from stdnum.it import codicefiscale
from stdnum.us import ssn

DEFAULT_REGION = "US"
REGIONS = frozenset(phonenumbers.SUPPORTED_REGIONS)

EMAIL = "EMAIL"
PHONE = "PHONE"
CREDIT_CARD = "CREDIT_CARD"
IBAN = "IBAN"
SSN = "SSN"
NATIONAL_ID = "NATIONAL_ID"
IP_ADDRESS = "IP_ADDRESS"
KINDS = (EMAIL, IBAN, CREDIT_CARD, SSN, NATIONAL_ID, IP_ADDRESS, PHONE)


class PiiSpan(NamedTuple):
    start: int
    end: int
    kind: str
    detail: str = ""  # which national id (`es.dni`), IP version: never the matched text


_EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,63}(?![\w-])")
_CARD = re.compile(
    r"(?<![\d-])(?:\d{4}([ -]?)\d{4}\1\d{4}\1\d{4}(?:\1\d{1,3})?"  # 4-4-4-4(-3)
    r"|\d{4}([ -]?)\d{6}\2\d{4,5}"  # 4-6-5 (American Express), 4-6-4 (Diners)
    r"|\d{13,19})(?![\d])"
)
# Visa, Mastercard (51-55, 2221-2720), American Express, Diners, JCB, Discover, UnionPay.
_CARD_NETWORK = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[0689]|35|6)")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}")
_SSN = re.compile(r"(?<![\d-])\d{3}-\d{2}-\d{4}(?![\d-])")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)(?!\w)")
_IPV6 = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?"
    r"(?![\w:]|\.\d)"
)
_NATIONAL_IDS: tuple[tuple[str, re.Pattern[str], Callable[[str], bool]], ...] = (
    ("es.dni", re.compile(r"(?<![\w-])\d{8}-?[A-Z](?!\w)"), dni.is_valid),
    (
        "it.codicefiscale",
        re.compile(r"(?<!\w)[A-Z]{6}\d{2}[A-Z]\d{2}[A-Z]\d{3}[A-Z](?!\w)"),
        codicefiscale.is_valid,
    ),
    ("br.cpf", re.compile(r"(?<![\d.-])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\d.-])"), cpf.is_valid),
    ("ca.sin", re.compile(r"(?<![\d-])\d{3}([- ])\d{3}\1\d{3}(?![\d-])"), sin.is_valid),
)
_MIN_IBAN = 15  # Norway's, the shortest


def find_pii(text: str, *, region: str = DEFAULT_REGION) -> list[PiiSpan]:
    """Every piece of personal data found in `text`, in order, no two overlapping.

    `region` is the ISO 3166 country whose national phone format is recognised (numbers with
    a `+` country code are recognised whatever it is). An unknown region is a ValueError.
    """
    if region not in REGIONS:
        raise ValueError(
            f"unknown phone region {region!r}; use an ISO 3166 country code such as US or GB"
        )
    if len(text) == _UUID_LENGTH and _UUID.fullmatch(text):
        # A run's, a step's or an approval's id: its digits are never a phone number, and
        # redacting part of one would break every link to it.
        return []
    if len(text) <= _REMEMBERED_LENGTH:
        return list(_found_remembered(str(text), region))
    return _found(text, region)


_UUID_LENGTH = 36
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# pii_handling applies to every copy a store writes, and one value has several (a model's
# answer is in its call's record, the step's record, the event and the run's state): the
# spans of the last texts scanned are kept, for texts short enough that keeping them costs
# little (at most 1,024 texts of 8 KB).
_REMEMBERED_LENGTH = 8 * 1024


@lru_cache(maxsize=1024)
def _found_remembered(text: str, region: str) -> tuple[PiiSpan, ...]:
    return tuple(_found(text, region))


def _found(text: str, region: str) -> list[PiiSpan]:
    # Most texts the engine scans (roles, prompts, short values) hold few digits or none:
    # every detector but the e-mail one needs some, so one count rules most of them out.
    digits = _digit_count(text)
    taken: list[PiiSpan] = []
    for detector, least in _DETECTORS:
        if digits < least:
            continue
        for found in detector(text):
            if not _overlaps(found, taken):
                taken.append(found)
    if digits >= _MIN_PHONE_DIGITS:
        for found in _phones(text, region):
            if not _overlaps(found, taken):
                taken.append(found)
    return sorted(taken)


def _digit_count(text: str) -> int:
    """How many characters of `text` are digits by `str.isdigit` (which counts every
    character the patterns' `\\d` matches, and a few more)."""
    if text.isascii():  # then only 0-9 are digits, and counting them runs in C
        return sum(map(text.count, "0123456789"))
    return sum(map(str.isdigit, text))


def _overlaps(span: PiiSpan, taken: list[PiiSpan]) -> bool:
    return any(span.start < other.end and other.start < span.end for other in taken)


def _emails(text: str) -> Iterator[PiiSpan]:
    if "@" not in text:
        return
    for match in _EMAIL.finditer(text):
        yield PiiSpan(match.start(), match.end(), EMAIL)


def _cards(text: str) -> Iterator[PiiSpan]:
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and _CARD_NETWORK.match(digits) and luhn.is_valid(digits):
            yield PiiSpan(match.start(), match.end(), CREDIT_CARD)


def _ibans(text: str) -> Iterator[PiiSpan]:
    for match in _IBAN.finditer(text):
        # The pattern runs on into whatever upper-case word follows; the longest prefix that
        # is a valid IBAN and ends where a word ends is the number.
        offsets = [match.start() + i for i, char in enumerate(match.group()) if char != " "]
        compact = match.group().replace(" ", "")
        for length in range(len(compact), _MIN_IBAN - 1, -1):
            end = offsets[length - 1] + 1
            if (end == len(text) or not text[end].isalnum()) and iban.is_valid(compact[:length]):
                yield PiiSpan(match.start(), end, IBAN)
                break


def _ssns(text: str) -> Iterator[PiiSpan]:
    for match in _SSN.finditer(text):
        if ssn.is_valid(match.group()):
            yield PiiSpan(match.start(), match.end(), SSN, "us.ssn")


def _national_ids(text: str) -> Iterator[PiiSpan]:
    for name, pattern, is_valid in _NATIONAL_IDS:
        for match in pattern.finditer(text):
            if is_valid(match.group()):
                yield PiiSpan(match.start(), match.end(), NATIONAL_ID, name)


def _ipv6s(text: str) -> Iterator[PiiSpan]:
    # Before IPv4 (_DETECTORS): one may end in an IPv4 address (::ffff:192.0.2.1), and is
    # taken whole.
    if "::" in text or text.count(":") >= 7:
        for match in _IPV6.finditer(text):
            candidate = match.group()
            # A digit, so that C++ names (ab::cd) are not addresses.
            if any(c.isdigit() for c in candidate) and _is_ip(candidate, ipaddress.IPv6Address):
                yield PiiSpan(match.start(), match.end(), IP_ADDRESS, "ipv6")


def _ipv4s(text: str) -> Iterator[PiiSpan]:
    if "." in text:
        for match in _IPV4.finditer(text):
            if _is_ip(match.group(), ipaddress.IPv4Address):
                yield PiiSpan(match.start(), match.end(), IP_ADDRESS, "ipv4")


def _is_ip(candidate: str, kind: type[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> bool:
    try:
        kind(candidate)
    except ValueError:
        return False
    return True


def _phones(text: str, region: str) -> Iterator[PiiSpan]:
    """Phone numbers; `find_pii` calls it only on texts of _MIN_PHONE_DIGITS digits or more."""
    matcher = phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID)
    for match in matcher:
        yield PiiSpan(match.start, match.end, PHONE)


_MIN_PHONE_DIGITS = 7  # no phone number is shorter
# Each detector with the fewest digits a match of it holds (its pattern's \d's; an IPv6
# address needs one, see _ipv6s), in the order they take precedence.
_DETECTORS: tuple[tuple[Callable[[str], Iterator[PiiSpan]], int], ...] = (
    (_emails, 0),
    (_ibans, 2),  # CC00…
    (_cards, 13),
    (_ssns, 9),
    (_national_ids, 7),  # a codice fiscale's; a DNI has 8, a SIN 9, a CPF 11
    (_ipv6s, 1),
    (_ipv4s, 4),
)
