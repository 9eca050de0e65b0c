"""`pii_handling` on every copy of a run's data a store writes (seed 000 §3.7.3).

The engine works on clear values while it runs; what a store writes is one of two kinds:

- copies a person reads and nothing reads back (step records, events, error messages,
  approvals' text, judges' rationales): `kept` — REDACT writes `[REDACTED:KIND]`, ENCRYPT
  `enc:<token>`;
- copies the engine reads back after a pause, a crash or a child's end (the run's input,
  context, state, plan and output, a child's input, memory, an approval's payload):
  `sealed` — ENCRYPT as above; REDACT writes `[REDACTED:KIND enc:<token>]`, a redaction to
  whoever reads it (pages and API answers show `[REDACTED:KIND]`, `shown`) that still holds
  the value under the vault's key, so a resumed run goes on with what it had. `opened`
  turns a sealed copy back on load.

Without a cipher, ENCRYPT falls back to REDACT and REDACT's sealed copies are redacted for
good (a run resumed from them goes on with the redactions): nothing is ever written clear.
"""

from __future__ import annotations

from typing import Any

from runs.engine.definition import Definition
from runs.engine.ports import PII_ALLOW, PII_ENCRYPT, PII_REDACT, Cipher, Screening


class PiiCopies:
    """The entity's pii_handling applied to what a store writes, by `screening`
    (governance/safety.py on the server); `cipher` is the vault's, or None."""

    def __init__(self, screening: Screening, cipher: Cipher | None = None):
        self.screening = screening
        self.cipher = cipher

    def mode(self, definition: Definition) -> str:
        mode = definition["governance"]["human_oversight"].get("pii_handling", PII_REDACT)
        return PII_REDACT if mode == PII_ENCRYPT and self.cipher is None else mode

    def kept(self, definition: Definition, value: Any) -> Any:
        mode = self.mode(definition)
        if mode == PII_ALLOW or value is None:
            return value
        encrypt = self.cipher.encrypt if mode == PII_ENCRYPT and self.cipher else None
        return self.screening.pii_protect(value, mode, encrypt)

    def sealed(self, definition: Definition, value: Any) -> Any:
        mode = self.mode(definition)
        if mode == PII_ALLOW or value is None:
            return value
        encrypt = None if self.cipher is None else self.cipher.encrypt
        return self.screening.pii_seal(value, mode, encrypt)

    def opened(self, value: Any) -> Any:
        if value is None or self.cipher is None:
            return value
        return self.screening.pii_open(value, self.cipher.decrypt)
