"""What the content filters cost: loading the classifier once, then each scan.

    .venv/bin/python bench/safety.py [--calls 500] [--json]

First, in fresh interpreters, the time and resident memory that importing alt-profanity-check
(scikit-learn, its model) adds: to a bare interpreter, and to a worker that has Django set up and
litellm imported already. Then, call by call, `scan` of a typical model answer (about 700
characters with an e-mail address and a phone number) per filter, `redact_value` of a structured
answer, and `pii_protect` ENCRYPT with a Fernet key. Prints mean, median and 95th percentile
milliseconds, or one JSON line with --json. Touches no database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ANSWER = (
    "Thanks for the posting. The Senior Software Engineer role at Acme Robotics builds the "
    "control software of warehouse robots: services in Python, code review and mentoring two "
    "engineers. Requirements are six years of Python, distributed systems and clear writing; "
    "the team offers remote work, a learning budget and equity. For questions, the hiring "
    "manager is Ada Lovelace (ada.lovelace@example.com, +44 20 7946 0958). Interviews run over "
    "two weeks: a screening call, a systems design session and a final conversation with the "
    "team. Salary depends on experience and location. We welcome applicants of every "
    "background and will answer every application within ten working days of receiving it."
)
STRUCTURED = {
    "title": "Senior Software Engineer",
    "summary": ANSWER,
    "requirements": ["six years of Python", "distributed systems", "clear writing"],
    "contact": {"email": "ada.lovelace@example.com", "phone": "+44 20 7946 0958"},
    "extraction_confidence": 0.92,
}

_MEASURE_IMPORT = """
import json, sys, time
def rss():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmRSS")) / 1024
if sys.argv[1] == "worker":
    import os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "1")
    import django
    django.setup()
    from runs.gateway import litellm_module
    litellm_module()
before, started = rss(), time.perf_counter()
from governance.offensive import load_classifier
load_classifier()(["warm"])
print(json.dumps({"import_ms": (time.perf_counter() - started) * 1000, "rss_mb": rss() - before}))
"""


def classifier_load(where: str) -> dict[str, float]:
    result = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", _MEASURE_IMPORT, where],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return {name: round(value, 1) for name, value in figures.items()}


def timed(call: Callable[[], Any], calls: int) -> dict[str, float]:
    for _ in range(min(20, calls)):
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "mean_ms": round(statistics.fmean(samples), 3),
        "p50_ms": round(samples[len(samples) // 2], 3),
        "p95_ms": round(samples[int(len(samples) * 0.95)], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    loading = {where: classifier_load(where) for where in ("bare", "worker")}

    from cryptography.fernet import Fernet

    from governance.safety import pii_protect, redact_value, scan

    fernet = Fernet(Fernet.generate_key())
    cases: dict[str, Callable[[], Any]] = {
        "scan PII": lambda: scan(ANSWER, ["PII"]),
        "scan PROFANITY": lambda: scan(ANSWER, ["PROFANITY"]),
        "scan TOXICITY": lambda: scan(ANSWER, ["TOXICITY"]),
        "scan all three": lambda: scan(ANSWER, ["PII", "PROFANITY", "TOXICITY"]),
        "redact_value all three": lambda: redact_value(
            STRUCTURED, ["PII", "PROFANITY", "TOXICITY"]
        ),
        "pii_protect ENCRYPT": lambda: pii_protect(
            STRUCTURED, "ENCRYPT", lambda s: fernet.encrypt(s.encode()).decode()
        ),
    }
    per_call = {name: timed(call, options.calls) for name, call in cases.items()}

    if options.json:
        print(json.dumps({"classifier_load": loading, "per_call": per_call}))
        return
    print("loading the classifier (once per process):")
    for where, figures in loading.items():
        print(
            f"  into a {where:<7} process: {figures['import_ms']:6.0f} ms, +{figures['rss_mb']} MB"
        )
    print(f"per call ({len(ANSWER)}-character answer, {options.calls} calls), ms:")
    for name, numbers in per_call.items():
        print(
            f"  {name:<24} mean {numbers['mean_ms']:7.3f}  p50 {numbers['p50_ms']:7.3f}  "
            f"p95 {numbers['p95_ms']:7.3f}"
        )


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    main()
