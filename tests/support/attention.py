"""A three-level tree whose leaf runs out of budget: the root and the middle run wait on it
(WAITING) while it waits BLOCKED on a person raising its budget."""

from __future__ import annotations

from typing import Any

from tests.factories import EntityFactory
from tests.support.runs import io


def budget_tree(workspace: Any) -> Any:
    """process `launch` > agent `planner` > skill `writer`, whose own budget is too small
    for one model call. Answers the process."""
    leaf = EntityFactory(
        workspace=workspace,
        name="writer",
        type="SKILL",
        io_contract=io(ok="boolean"),
        max_cost=0.000001,
    )
    middle = EntityFactory(workspace=workspace, name="planner", type="AGENT", children=[leaf])
    return EntityFactory(
        workspace=workspace, name="launch", type="PROCESS", children=[middle], max_cost=0.01
    )
