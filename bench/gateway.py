"""Per-call cost of the model gateway on the offline model, against a bare litellm call.

    .venv/bin/python bench/gateway.py [--calls 1000] [--json]

Times, call by call, `LiteLLMGateway.complete` on the built-in offline model (plain text, with
a response schema, with a tool to call) and, as the floor it sits on, a bare
`litellm.completion(..., mock_response=...)` and a bare `litellm.completion` of the offline
provider. Prints mean, median and 95th percentile milliseconds per call, or one JSON line
with --json. Touches no database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "1")

import django  # noqa: E402

django.setup()

from runs.engine.ports import ModelRequest  # noqa: E402
from runs.gateway import LiteLLMGateway, litellm_module  # noqa: E402

SYSTEM = (
    "You are a recruitment content analyst. Extract what a candidate needs to know from a job "
    "posting, precisely and without invention. Never use discriminatory language."
)
USER = (
    "Job posting: Acme Robotics is hiring a Senior Software Engineer to build the control "
    "software of its warehouse robots. You will design services in Python, review code, and "
    "mentor two engineers. We offer remote work, a learning budget and equity. Requirements: "
    "six years of Python, distributed systems, and clear writing."
)
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "requirements": {"type": "array", "items": {"type": "string"}},
        "responsibilities": {"type": "array", "items": {"type": "string"}},
        "benefits": {"type": "array", "items": {"type": "string"}},
        "extraction_confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["title", "requirements", "responsibilities", "benefits"],
}
TOOL = {
    "name": "parse_job_description",
    "description": "Extract structured information from job description text",
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "extract_fields": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["text"],
    },
}


def timed(call: Callable[[int], Any], calls: int) -> dict[str, float]:
    for i in range(min(50, calls)):  # warm: clients, tokenizer, caches
        call(-1 - i)
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "mean_ms": round(statistics.fmean(samples), 3),
        "p50_ms": round(samples[len(samples) // 2], 3),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    litellm = litellm_module()
    import_s = time.perf_counter() - started
    gateway = LiteLLMGateway()
    # Its first call enters the offline model's price in litellm's map; the bare offline
    # case below then measures litellm with that done too.
    gateway.complete(
        ModelRequest(
            provider="local", model="offline", messages=({"role": "user", "content": "hi"},)
        )
    )

    def messages(i: int) -> list[dict[str, str]]:
        # A different prompt each call, as in a run: nothing is answered from a cache.
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{USER} #{i}"}]

    def request(i: int, **fields: Any) -> ModelRequest:
        return ModelRequest(
            provider="local", model="offline", messages=tuple(messages(i)), **fields
        )

    cases: dict[str, Callable[[int], Any]] = {
        "litellm_mock_response": lambda i: litellm.completion(
            model="openai/gpt-4o-mini", messages=messages(i), mock_response="A fixed answer."
        ),
        "litellm_offline_text": lambda i: litellm.completion(
            model="local/offline", messages=messages(i)
        ),
        "gateway_offline_text": lambda i: gateway.complete(request(i)),
        "gateway_offline_schema": lambda i: gateway.complete(request(i, response_schema=SCHEMA)),
        "gateway_offline_tool": lambda i: gateway.complete(
            request(i, tools=(TOOL,), tool_choice=TOOL["name"])
        ),
    }
    results = {name: timed(call, args.calls) for name, call in cases.items()}
    overhead = round(
        results["gateway_offline_text"]["mean_ms"] - results["litellm_offline_text"]["mean_ms"], 3
    )
    summary = {
        "calls": args.calls,
        "litellm_import_s": round(import_s, 2),
        "gateway_overhead_text_ms": overhead,
        **results,
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{args.calls} calls each; litellm import {import_s:.2f} s (once per process)")
    print(f"{'case':<26}{'mean ms':>10}{'p50 ms':>10}{'p95 ms':>10}")
    for name, figures in results.items():
        print(
            f"{name:<26}{figures['mean_ms']:>10.3f}{figures['p50_ms']:>10.3f}"
            f"{figures['p95_ms']:>10.3f}"
        )
    print(f"gateway's own work over a bare offline litellm call: {overhead:.3f} ms")


if __name__ == "__main__":
    main()
