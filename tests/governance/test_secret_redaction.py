"""Secret redaction (governance/secret_redaction.py): every encoding of a secret a server may
echo is replaced, in running text and in every string and key of a decoded value."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

import pytest

from governance.secret_redaction import SecretRedaction

SECRET = "s3cr3t/To&ken+a=b é"


def json_escaped_everywhere(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


@pytest.mark.parametrize(
    "echo",
    [
        SECRET,
        json.dumps(SECRET).replace("/", "\\/"),  # PHP
        json.dumps(SECRET).replace("&", "\\u0026"),  # Go
        json.dumps(SECRET, ensure_ascii=True),
        json_escaped_everywhere(SECRET),
        json_escaped_everywhere(SECRET).upper().replace("\\U", "\\u"),
        quote(SECRET, safe=""),
        quote(SECRET),
        quote_plus(SECRET),
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(SECRET, safe="")),
        base64.b64encode(SECRET.encode()).decode(),
        base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
        "".join(f"&#{ord(c)};" for c in SECRET),  # HTML character references
    ],
)
def test_each_encoding_of_a_secret_is_redacted_in_text(echo):
    redacted = SecretRedaction([SECRET]).text(f"before {echo} after")

    assert redacted.startswith("before ") and redacted.endswith(" after")
    assert "[redacted]" in redacted
    assert SECRET not in redacted and echo not in redacted


@pytest.mark.parametrize("user", ["", "u", "us", "usr", "user"])
@pytest.mark.parametrize("alphabet", [base64.b64encode, base64.urlsafe_b64encode])
def test_the_secret_base64_encoded_inside_a_longer_string_is_redacted_at_every_offset(
    user, alphabet
):
    for spelling in (SECRET, quote(SECRET, safe="")):  # Basic auth form-encodes first
        encoded = alphabet(f"{user}:{spelling}:tail".encode()).decode()

        redacted = SecretRedaction([SECRET]).text(encoded)

        assert "[redacted]" in redacted
        # What is left is the few characters that also code the bytes around the secret.
        assert len(redacted) - len("[redacted]") <= len(encoded) - len(spelling) * 4 // 3 + 6


def test_every_string_and_key_of_a_decoded_value_is_redacted():
    value = {"a": [SECRET, {"b": f"x{SECRET}y"}], SECRET: 1, "n": 7, "ok": None}

    assert SecretRedaction([SECRET]).value(value) == {
        "a": ["[redacted]", {"b": "x[redacted]y"}],
        "[redacted]": 1,
        "n": 7,
        "ok": None,
    }


def test_text_without_the_secret_is_left_as_it_is():
    text = json.dumps({"other": "s3cr3t/To", "b64": base64.b64encode(b"hello world").decode()})

    assert SecretRedaction([SECRET]).text(text) == text
    assert SecretRedaction([]).value({"k": SECRET}) == {"k": SECRET}


def test_a_redaction_shows_no_secret_in_its_repr_and_cannot_be_pickled():
    import pickle

    redaction = SecretRedaction([SECRET])

    assert SECRET not in repr(redaction)
    with pytest.raises(TypeError):
        pickle.dumps(redaction)
