"""Per-call CPU and wall time of the model gateway on the offline model, against bare litellm.

    DEBUG=1 .venv/bin/python bench/gateway.py [--calls 2000] [--rounds 1] [--json]

Calls `LiteLLMGateway().complete` on the built-in offline model with requests shaped like the
engine's (a system prompt and a user message of a few hundred characters):

- `gateway_tool`: a TOOL_ARGUMENTS request, one tool with JSON-schema `parameters` that the
  model is told to call (what every ACTION of bench/engine.py asks);
- `gateway_schema`: a THOUGHT request with a JSON-schema response;
- `gateway_text`: a THOUGHT request answered in prose;

and, as the floor they sit on, a bare `litellm.completion(..., mock_response=...)`
(`litellm_mock`) and a bare `litellm.completion` of the offline provider (`litellm_offline`).
Every call has a prompt of its own, so no answer comes from a cache. After a warm-up, each
case is timed over --calls calls: CPU per call (`time.process_time`, all threads of the
process: litellm logs on a thread of its own) and wall per call (mean, p50, p95). With
--rounds N the cases are timed N times, interleaved, and each keeps its round of least CPU.
Touches no database. The machine is shared: compare CPU figures over repeated runs.
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
    "You are Extract job facts, an ACTION of the Recruitment process. Extract what a candidate "
    "needs to know from a job posting, precisely and without invention. Never use "
    "discriminatory language. Answer only with what the step asks for."
)
USER = (
    "Call the tool parse_job_description with the right arguments for this step: extract. "
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
            "language": {"type": "string", "enum": ["en", "de", "fr"]},
        },
        "required": ["text"],
    },
}


def timed(call: Callable[[int], Any], calls: int, warm: int) -> dict[str, float]:
    for i in range(warm):  # clients, tokenizer, caches
        call(-1 - i)
    samples = []
    cpu_started = time.process_time()
    wall_started = time.perf_counter()
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1000)
    wall_ms = (time.perf_counter() - wall_started) * 1000
    cpu_ms = (time.process_time() - cpu_started) * 1000
    samples.sort()
    return {
        "cpu_ms": round(cpu_ms / calls, 3),
        "wall_ms": round(wall_ms / calls, 3),
        "p50_ms": round(samples[len(samples) // 2], 3),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 3),
        "mean_ms": round(statistics.fmean(samples), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per case")
    parser.add_argument("--warm", type=int, default=200, help="untimed calls before")
    parser.add_argument("--rounds", type=int, default=1, help="keep each case's best round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    litellm = litellm_module()
    import_s = time.perf_counter() - started
    gateway = LiteLLMGateway()
    # The gateway's first call enters the offline model's price in litellm's map; the bare
    # offline case then measures litellm with that done too, as in the product.
    gateway.complete(
        ModelRequest(
            provider="local", model="offline", messages=({"role": "user", "content": "hi"},)
        )
    )

    def messages(i: int) -> list[dict[str, str]]:
        # A prompt of its own for each call, as in a run: nothing is answered from a cache.
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{USER} #{i}"}]

    def request(i: int, **fields: Any) -> ModelRequest:
        return ModelRequest(
            provider="local",
            model="offline",
            messages=tuple(messages(i)),
            temperature=0.2,
            max_tokens=1024,
            **fields,
        )

    cases: dict[str, Callable[[int], Any]] = {
        "litellm_mock": lambda i: litellm.completion(
            model="gpt-4o-mini", messages=messages(i), mock_response="hi"
        ),
        "litellm_offline": lambda i: litellm.completion(
            model="local/offline", messages=messages(i), max_retries=0
        ),
        "gateway_tool": lambda i: gateway.complete(
            request(i, tools=(TOOL,), tool_choice=TOOL["name"], purpose="TOOL_ARGUMENTS")
        ),
        "gateway_schema": lambda i: gateway.complete(request(i, response_schema=SCHEMA)),
        "gateway_text": lambda i: gateway.complete(request(i)),
    }
    results: dict[str, dict[str, float]] = {}
    for _ in range(max(1, args.rounds)):
        for name, call in cases.items():
            figures = timed(call, args.calls, args.warm)
            if name not in results or figures["cpu_ms"] < results[name]["cpu_ms"]:
                results[name] = figures
    floor = results["litellm_mock"]["cpu_ms"]
    summary = {
        "calls": args.calls,
        "rounds": args.rounds,
        "litellm_import_s": round(import_s, 2),
        "tool_over_floor_cpu_ms": round(results["gateway_tool"]["cpu_ms"] - floor, 3),
        **results,
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(
        f"{args.calls} calls per case, best of {args.rounds} round(s); "
        f"litellm import {import_s:.2f} s (once per process)"
    )
    print(f"{'case':<18}{'cpu ms':>9}{'wall ms':>9}{'p50 ms':>9}{'p95 ms':>9}")
    for name, f in results.items():
        print(
            f"{name:<18}{f['cpu_ms']:>9.3f}{f['wall_ms']:>9.3f}{f['p50_ms']:>9.3f}{f['p95_ms']:>9.3f}"
        )
    over = summary["tool_over_floor_cpu_ms"]
    print(f"gateway_tool over the litellm_mock floor: {over:.3f} ms CPU")


if __name__ == "__main__":
    main()
