"""Loop control (seed 000 §3.5.3): when a run has converged, what earlier passes the model
sees, and whether another pass may start.

One iteration is one pass over the plan. Iterations count from 1, as `Run.iteration` does.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

OPERATORS: Mapping[str, Callable[[float, float], bool]] = {
    "GT": operator.gt,
    "LT": operator.lt,
    "GTE": operator.ge,
    "LTE": operator.le,
    "EQ": lambda value, threshold: math.isclose(value, threshold, rel_tol=1e-9, abs_tol=1e-12),
}

# How many recent passes LAST_N shows unless told otherwise (the seed's "last 3").
DEFAULT_LAST_N = 3
_SUMMARY_LINE_CHARS = 300

Summarizer = Callable[[Sequence[Any]], str]


def metric_value(state: Mapping[str, Any], path: str) -> float | None:
    """The number at `path` in the state: a key, or a dotted path through objects and lists
    (`review.score`, `scores.0`); None when it is missing or not a number."""
    value: Any
    if path in state:
        value = state[path]
    else:
        value = state
        for part in path.split("."):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def unmet(criteria: Sequence[Mapping[str, Any]], state: Mapping[str, Any]) -> list[str]:
    """Every convergence criterion the state does not meet, as a sentence for the trace."""
    reasons: list[str] = []
    for criterion in criteria:
        metric, op = str(criterion.get("metric", "")), str(criterion.get("operator", ""))
        threshold = criterion.get("threshold")
        compare = OPERATORS.get(op)
        value = metric_value(state, metric)
        if compare is None:
            reasons.append(f"{metric}: unknown operator {op!r} (known: {', '.join(OPERATORS)})")
        elif value is None:
            reasons.append(f"{metric} is not in the state as a number")
        elif not compare(value, float(threshold or 0)):
            reasons.append(f"{metric} is {value:g}, not {op} {threshold}")
    return reasons


def converged(criteria: Sequence[Mapping[str, Any]], state: Mapping[str, Any]) -> bool:
    """True when every criterion holds against the state.

    No criteria means no convergence test: the loop runs until its iteration limit (with the
    default `max_iterations: 1`, one pass). A missing metric is not converged.
    """
    return bool(criteria) and not unmet(criteria, state)


def iteration_context(
    history: Sequence[Any],
    mode: str,
    n: int = DEFAULT_LAST_N,
    summarize: Summarizer | None = None,
) -> list[Any] | str:
    """What the model sees of earlier passes: FULL_HISTORY every one, LAST_N the last `n`,
    SUMMARIZED one text (`summarize`, by default a line per pass). Unknown modes show all."""
    if mode == "LAST_N":
        return list(history[-n:]) if n > 0 else []
    if mode == "SUMMARIZED":
        return (summarize or default_summary)(history)
    return list(history)


def default_summary(history: Sequence[Any]) -> str:
    """A deterministic, model-free summary: one line per pass, long ones cut."""
    lines = []
    for number, result in enumerate(history, start=1):
        text = result if isinstance(result, str) else _json(result)
        if len(text) > _SUMMARY_LINE_CHARS:
            text = text[: _SUMMARY_LINE_CHARS - 1] + "…"
        lines.append(f"Iteration {number}: {text}")
    return "\n".join(lines)


def summary_due(passes: int, summarised: int, every: int | None) -> bool:
    """Whether the earlier passes are summarised (again) before the next one: once `every`
    passes (`summary_every_n_iterations`; None: 1, every pass) gathered since the last
    summary, which took in the first `summarised` of the `passes` kept."""
    return passes - summarised >= max(every or 1, 1)


def summarized(history: Sequence[Any], summary: str | None, summarised: int) -> str:
    """SUMMARIZED's text: the last summary (of the first `summarised` passes), then the
    passes since, verbatim."""
    span = f"iterations 1-{summarised}" if summarised > 1 else "iteration 1"
    lines = [f"Summary of {span}: {summary}"] if summary else []
    start = summarised if summary else 0
    for number, result in enumerate(history[start:], start=start + 1):
        lines.append(f"Iteration {number}: {result if isinstance(result, str) else _json(result)}")
    return "\n".join(lines)


def iteration_limit(max_iterations: int | None, hard_cap: int, granted: int = 0) -> int:
    """How many passes a run may make: its own `max_iterations`, never above the global hard
    cap (which alone applies when `max_iterations` is null), and the passes a person gave
    it when it ran out (`granted`, which may go past the cap: a person chose it)."""
    own = hard_cap if max_iterations is None else min(max_iterations, hard_cap)
    return own + max(0, granted)


def next_iteration_allowed(
    iteration: int, max_iterations: int | None, hard_cap: int, granted: int = 0
) -> bool:
    """Whether a pass may follow pass number `iteration` (counted from 1)."""
    return iteration < iteration_limit(max_iterations, hard_cap, granted)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
