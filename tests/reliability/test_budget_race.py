"""A budget shared by parallel children on two worker processes: every model call sets its
estimated cost aside at the budget before it is made, so together they never spend past it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import Sum

from runs.models import LLMCall, Run
from runs.services import run_start
from tests.factories import EntityFactory
from tests.reliability.hierarchies import thought
from tests.reliability.processes import wait_until

pytestmark = pytest.mark.reliability

BUDGET = Decimal("0.0005")


def test_parallel_children_on_two_workers_never_overspend_their_parents_budget(
    processes, workspace
):
    for name in ("w1", "w2", "w3", "w4"):
        EntityFactory(
            workspace=workspace,
            name=name,
            planning={
                "static_plan": {
                    "enabled": True,
                    "steps": [thought(1, "One"), thought(2, "Two"), thought(3, "Three")],
                }
            },
            logic_gate={"reasoning_config": {"max_tokens": 20}},
        )
    team = EntityFactory(
        workspace=workspace,
        name="team",
        type="SKILL",
        children=[{"child_id": n, "relationship": "PARALLEL"} for n in ("w1", "w2", "w3", "w4")],
        max_cost=float(BUDGET),
    )
    processes.worker("one", HIERARCH_OFFLINE_LATENCY_MS="150")
    processes.worker("two", HIERARCH_OFFLINE_LATENCY_MS="150")

    run = run_start(entity=team, input_data={})

    def children_stopped() -> bool:
        children = Run.objects.filter(parent=run)
        return (
            children.count() == 4
            and not children.exclude(status__in=["COMPLETED", "BLOCKED"]).exists()
        )

    wait_until(children_stopped, timeout=60, what="the children to stop", processes=processes)
    processes.wait_idle()
    run.refresh_from_db()

    statuses = sorted(Run.objects.filter(parent=run).values_list("status", flat=True))
    # The budget ran out before all twelve calls.
    assert "BLOCKED" in statuses, (statuses, processes.tails())
    spent = LLMCall.objects.filter(run__parent=run).aggregate(total=Sum("cost_usd"))["total"]
    figures = (run.total_cost_usd, spent, run.reserved_usd, statuses, processes.tails())
    assert run.total_cost_usd == spent, figures
    assert 0 < run.total_cost_usd <= BUDGET, figures
    assert run.reserved_usd == 0, figures  # every call's estimate was settled
    print(
        f"spent ${run.total_cost_usd} of ${BUDGET} in "
        f"{LLMCall.objects.filter(run__parent=run).count()} calls; children {statuses}"
    )
