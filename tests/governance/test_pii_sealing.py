"""Sealed copies (pii_handling on what the engine reads back) open to the value they were:
a JSON number stays a number, and text that only looks like a token is kept as written."""

from __future__ import annotations

from cryptography.fernet import Fernet

from governance import safety

CARD = 4111111111111111  # Luhn-valid: personal data as a JSON number


class Cipher:
    def __init__(self):
        self.fernet = Fernet(Fernet.generate_key())

    def encrypt(self, text: str) -> str:
        return self.fernet.encrypt(text.encode()).decode()

    def decrypt(self, token: str) -> str:
        return self.fernet.decrypt(token.encode()).decode()


def test_a_card_number_sealed_as_a_json_number_opens_as_the_same_number():
    cipher = Cipher()
    value = {"card": CARD, "count": 5, "note": "card 4111 1111 1111 1111"}
    for mode in (safety.REDACT, safety.ENCRYPT):
        sealed = safety.pii_seal(value, mode, cipher.encrypt)
        assert str(CARD) not in str(sealed)
        assert "4111 1111 1111 1111" not in str(sealed)
        assert isinstance(sealed["card"], str)
        assert safety.pii_open(sealed, cipher.decrypt) == value


def test_a_redacted_number_is_shown_as_a_redaction():
    sealed = safety.pii_seal({"card": CARD}, safety.REDACT, Cipher().encrypt)
    assert safety.pii_shown(sealed) == {"card": "[REDACTED:CREDIT_CARD]"}


def test_an_encrypted_number_in_a_call_log_is_revealed_as_the_number():
    cipher = Cipher()
    kept = safety.pii_protect({"card": CARD}, safety.ENCRYPT, cipher.encrypt)
    assert safety.pii_reveal(kept, cipher.decrypt) == {"card": CARD}


def test_text_that_only_looks_like_a_token_is_kept_as_written():
    cipher = Cipher()
    typed = {
        "text": "use enc:abcDEF123 then [REDACTED:EMAIL enc:gAAAAAforged==]",
        "other": "enc:notatoken",
    }
    assert safety.pii_open(typed, cipher.decrypt) == typed


def test_an_id_is_never_taken_for_personal_data():
    # The digits of a UUID can read as a phone number (here a London one, for region GB);
    # redacting part of an id would break every link to it.
    run_id = "44207946-0958-a123-b555-c12345678901"
    sealed = safety.pii_seal({"run_id": run_id}, safety.REDACT, Cipher().encrypt, region="GB")
    assert sealed == {"run_id": run_id}
