"""A draft-review loop that runs out of passes: `writer` (SKILL) drafts, then reviews, and
the review sends it back to the draft while the iteration is below `back_while`; it may
make two passes, so with the default it waits BLOCKED (MAX_PASSES_EXHAUSTED) after two."""

from __future__ import annotations

from typing import Any

from tests.factories import EntityFactory
from tests.support.runs import step


def review_loop(workspace: Any, *, back_while: int = 3, max_iterations: int = 2) -> Any:
    review = step(2, "Review", "THOUGHT")
    review["exit_conditions"] = [
        {"condition": {"<": [{"var": "iteration"}, back_while]}, "next_step": 1}
    ]
    return EntityFactory(
        workspace=workspace,
        name="writer",
        type="SKILL",
        planning={
            "static_plan": {"enabled": True, "steps": [step(1, "Draft", "THOUGHT"), review]},
            "loop_control": {"max_iterations": max_iterations},
        },
    )
