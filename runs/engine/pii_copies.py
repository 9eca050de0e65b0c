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

from governance import safety


class PiiCopies:
    """The entity's pii_handling applied to what a store writes; `cipher` is the vault's
    (`encrypt(str) -> str`, `decrypt(str) -> str`), or None."""

    def __init__(self, cipher: Any = None):
        self.cipher = cipher

    def mode(self, definition: dict) -> str:
        mode = definition["governance"]["human_oversight"].get("pii_handling", safety.REDACT)
        return safety.REDACT if mode == safety.ENCRYPT and self.cipher is None else mode

    def kept(self, definition: dict, value: Any) -> Any:
        mode = self.mode(definition)
        if mode == safety.ALLOW or value is None:
            return value
        encrypt = self.cipher.encrypt if mode == safety.ENCRYPT else None
        return safety.pii_protect(value, mode, encrypt)

    def sealed(self, definition: dict, value: Any) -> Any:
        mode = self.mode(definition)
        if mode == safety.ALLOW or value is None:
            return value
        return safety.pii_seal(value, mode, None if self.cipher is None else self.cipher.encrypt)

    def opened(self, value: Any) -> Any:
        if value is None or self.cipher is None:
            return value
        return safety.pii_open(value, self.cipher.decrypt)


def shown(value: Any) -> Any:
    """A stored value as pages and API answers show it (see module docstring)."""
    return safety.pii_shown(value)
