"""Settings loaded in a new interpreter, for tests of what the environment makes of them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def settings_printed(
    *expressions: str, without: Iterable[str] = (), preamble: str = "", **env: str
) -> subprocess.CompletedProcess:
    """Start Django with this environment, less the variables `without`, plus `env`, and print
    each of `expressions` (of `settings`) on one line, separated by spaces; `preamble` is a
    statement run first (an import)."""
    environment = {k: v for k, v in os.environ.items() if k not in set(without)}
    code = (
        f"{preamble}; import django; django.setup(); from django.conf import settings; "
        f"print({', '.join(expressions)})"
    ).lstrip("; ")
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**environment, **env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
