"""Reasoning strategies that take more than one call (seed 000 §3.4.1's reasoning modes).

- REFLECTION: the draft (the step's first call), then a critique of it against the entity's
  criteria (its review's success criteria, else the task and the output contract), then, when
  the critique says "revise", a revision told what to fix that answers in the output schema.
  A critique that says "keep" keeps the draft: two calls instead of three.
- TREE_OF_THOUGHTS: several candidate answers (BRANCHES), each asked to take an approach of
  its own, then a judge call that scores them and names the best, which the step keeps.

Each call is one of the step's model calls (its index after the ones before it), recorded the
moment it returns and reused on a replay like any other: a worker that dies between the
critique and the revision pays for neither again. Each is counted against the run's budget and
`max_llm_calls` before it is made. CHAIN_OF_THOUGHT stays a prompt strategy (prompts.py);
REACT is the reasoning loop (react.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from runs.engine.outcomes import Failed, OverBudget
from runs.engine.ports import LLM_ERROR, ModelReply, ModelRequest
from runs.engine.state import RunView

MULTI_CALL = ("REFLECTION", "TREE_OF_THOUGHTS")
BRANCHES = 3
_ANSWER_CHARS = 4000  # of an answer shown to a critique or a judge

CRITIQUE_SCHEMA: dict[str, Any] = {
    "title": "hierarch_critique",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "verdict": {"enum": ["keep", "revise"]},
        "issues": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
    },
    "required": ["verdict", "issues"],
}
JUDGE_SCHEMA: dict[str, Any] = {
    "title": "hierarch_branch_judgment",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "best": {"type": "integer", "minimum": 1, "maximum": BRANCHES},
        "scores": {
            "type": "array",
            "items": {"type": "number", "minimum": 0, "maximum": 1},
            "minItems": BRANCHES,
            "maxItems": BRANCHES,
        },
        "rationale": {"type": "string"},
    },
    "required": ["best", "scores", "rationale"],
}

# thoughts.call_model for the step: (run, request, index) -> (run, reply or why there is none)
Call = Callable[[RunView, ModelRequest, int], tuple[RunView, ModelReply | Failed | OverBudget]]
RequestFor = Callable[..., ModelRequest]  # thoughts.model_request for the run


def strategy_of(run: RunView) -> str | None:
    """The entity's multi-call strategy, or None for a single call."""
    mode = run.definition["logic_gate"]["reasoning_config"]["reasoning_mode"]
    return mode if mode in MULTI_CALL else None


def criteria_of(run: RunView) -> list[str]:
    """What a critique checks the draft against: the review's success criteria, else the
    task and the output contract."""
    review = run.definition["logic_gate"]["review_mechanism"]
    named = [c["criterion"] for c in review.get("success_criteria") or [] if c.get("criterion")]
    return named or [
        "it does the task it was given, completely and correctly",
        "it keeps to the output contract: every field filled with what its name says",
    ]


def reflect(
    run: RunView,
    messages: tuple[dict[str, Any], ...],
    schema: dict[str, Any] | None,
    draft: ModelReply,
    request_for: RequestFor,
    call: Call,
) -> tuple[RunView, ModelReply | Failed | OverBudget, int]:
    """REFLECTION after the draft (call 0): the critique (call 1) and, when it asks for one,
    the revision (call 2). Answers the reply to keep and the index of the next call."""
    shown = _answer_text(draft)
    criteria = "\n".join(f"- {c}" for c in criteria_of(run))
    critique_messages = (
        *messages,
        {"role": "assistant", "content": shown},
        {
            "role": "user",
            "content": "Critique the answer above against these criteria:\n"
            f'{criteria}\nSay "keep" when it meets them all, else "revise" and list each '
            'issue to fix. Answer as JSON: {"verdict": ..., "issues": [...]}.',
        },
    )
    request = request_for(
        messages=critique_messages, response_schema=CRITIQUE_SCHEMA, purpose="CRITIQUE"
    )
    run, reply = call(run, request, 1)
    if isinstance(reply, Failed | OverBudget):
        return run, reply, 2
    critique = reply.parsed if isinstance(reply.parsed, dict) else {}
    issues = [str(i) for i in critique.get("issues") or [] if str(i).strip()]
    if critique.get("verdict") != "revise":
        return run, draft, 2
    found = (
        "A critique of your answer found these issues:\n"
        + "\n".join(f"- {issue}" for issue in issues)
        if issues
        else "A critique of your answer found it falls short of the criteria:\n" + criteria
    )
    revise_messages = (
        *messages,
        {"role": "assistant", "content": shown},
        {
            "role": "user",
            "content": found + "\nAnswer again, fixing them.",
        },
    )
    request = request_for(messages=revise_messages, response_schema=schema, purpose="REVISION")
    run, revised = call(run, request, 2)
    return run, revised, 3


def branch(
    run: RunView,
    messages: tuple[dict[str, Any], ...],
    schema: dict[str, Any] | None,
    request_for: RequestFor,
    call: Call,
) -> tuple[RunView, ModelReply | Failed | OverBudget, int]:
    """TREE_OF_THOUGHTS: BRANCHES candidates (calls 0..BRANCHES-1), then the judge (call
    BRANCHES) picks one. Answers the candidate kept and the index of the next call."""
    candidates: list[ModelReply] = []
    for number in range(1, BRANCHES + 1):
        asked = (
            *messages,
            {
                "role": "user",
                "content": f"This is approach {number} of {BRANCHES}: take a line of your own, "
                "different from the obvious one where you can, and answer in full.",
            },
        )
        request = request_for(messages=asked, response_schema=schema, purpose="CANDIDATE")
        run, reply = call(run, request, number - 1)
        if isinstance(reply, Failed | OverBudget):
            return run, reply, BRANCHES + 1
        candidates.append(reply)
    listed = "\n\n".join(
        f"Candidate {number}:\n{_answer_text(reply)}"
        for number, reply in enumerate(candidates, start=1)
    )
    task = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    judged = (
        {
            "role": "system",
            "content": "You compare candidate answers to one task. Score each from 0 to 1 for "
            "how well it does the task, and name the best by its number.",
        },
        {"role": "user", "content": f"The task:\n{task}\n\n{listed}"},
    )
    request = request_for(messages=judged, response_schema=JUDGE_SCHEMA, purpose="JUDGE")
    run, verdict = call(run, request, BRANCHES)
    if isinstance(verdict, Failed | OverBudget):
        return run, verdict, BRANCHES + 1
    best = verdict.parsed.get("best") if isinstance(verdict.parsed, dict) else None
    if not isinstance(best, int) or isinstance(best, bool) or not 1 <= best <= BRANCHES:
        return run, Failed(LLM_ERROR, "the judge of the candidates named none", True), BRANCHES + 1
    return run, candidates[best - 1], BRANCHES + 1


def _answer_text(reply: ModelReply) -> str:
    """An answer as a later call reads it: its JSON, else its text, cut to a length."""
    text = (
        json.dumps(reply.parsed, ensure_ascii=False, sort_keys=True, default=str)
        if isinstance(reply.parsed, dict)
        else reply.content or ""
    )
    return text if len(text) <= _ANSWER_CHARS else text[: _ANSWER_CHARS - 1] + "…"
