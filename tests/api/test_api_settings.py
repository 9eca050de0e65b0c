"""The API's throttle rates and page sizes come from the environment, and a rate that cannot be
read stops the start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def api_settings(**env: str) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['user'], "
        "settings.HIERARCH_API['MAX_PAGE_SIZE'])"
    )
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_throttle_rate_and_page_size_come_from_the_environment():
    result = api_settings(HIERARCH_API_USER_RATE="30/second", HIERARCH_API_MAX_PAGE_SIZE="100")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["30/second", "100"]


def test_a_throttle_rate_that_cannot_be_read_stops_the_start():
    result = api_settings(HIERARCH_API_USER_RATE="lots")

    assert result.returncode != 0
    assert "HIERARCH_API_USER_RATE='lots' is not a rate; write it as 600/minute" in result.stderr
