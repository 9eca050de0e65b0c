"""Two approvers decide the same request at the same moment, from two OS processes: exactly one
decision is taken, and the other approver is told who decided and when.

Each process (tests/reliability/approval_decider.py) loads the request while it is still open,
as two inbox pages show it, and both call `approval_decide` at a moment agreed in advance. The
race is run several times; most rounds must have started both calls within milliseconds.
Both processes hold the request as open when they call, so what decides is the conditional
UPDATE of `approval_decide`, not an early check.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from approvals.models import Approval, ApprovalStatus
from governance.models import AuditAction, AuditRecord
from runs.models import Run, RunEvent, RunStatus
from tests.factories import EntityFactory, UserFactory, approval_request, grant, paused_run
from tests.reliability.processes import wait_until

pytestmark = pytest.mark.reliability

ROUNDS = 6
# Two calls started within this of each other raced: it is well inside the time one decision
# takes (a transaction with the update, the run's wake-up, an event and an audit record).
TOGETHER_S = 0.01
APPROVERS = {"one": ("dave", "approve"), "two": ("dora", "reject")}


def results(processes, name: str) -> list[dict]:
    return [
        json.loads(line.removeprefix("RESULT "))
        for line in processes.log(name).splitlines()
        if line.startswith("RESULT ")
    ]


def release(barrier: Path, index: int, start_at: float) -> None:
    """Write the round's start moment atomically: a process never reads half of it."""
    draft = barrier / f".go-{index}"
    draft.write_text(repr(start_at))
    os.replace(draft, barrier / f"go-{index}")


def test_two_approvers_deciding_at_once_in_two_processes_take_one_decision(
    processes, workspace, tmp_path
):
    for username, _ in APPROVERS.values():
        grant(UserFactory(username=username), workspace, "approver")
    entity = EntityFactory(workspace=workspace, name="publisher")
    requests = [approval_request(paused_run(entity)) for _ in range(ROUNDS)]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    for name, (username, decision) in APPROVERS.items():
        processes.start(
            name,
            "-m",
            "tests.reliability.approval_decider",
            "--barrier",
            str(barrier),
            "--name",
            name,
            "--user",
            username,
            "--decision",
            decision,
            "--approvals",
            ",".join(str(a.pk) for a in requests),
        )
    wait_until(
        lambda: all((barrier / f"ready-{name}").exists() for name in APPROVERS),
        timeout=60,
        what="both approvers to be ready",
        processes=processes,
    )

    winners, apart = [], []
    for index, request in enumerate(requests):
        release(barrier, index, time.time() + 0.25)
        wait_until(
            lambda index=index: all(len(results(processes, n)) > index for n in APPROVERS),
            timeout=30,
            what=f"both decisions of round {index}",
            processes=processes,
        )
        one, two = (results(processes, name)[index] for name in APPROVERS)
        context = (index, one, two, processes.tails())
        apart.append(abs(one["started"] - two["started"]))

        outcomes = sorted([one["outcome"], two["outcome"]])
        assert outcomes == ["decided", "refused"], context
        winner, loser = (one, two) if one["outcome"] == "decided" else (two, one)
        winners.append(winner["user"])

        request.refresh_from_db()
        decision = dict(APPROVERS.values())[winner["user"]]
        assert request.responded_by.username == winner["user"], context
        assert request.decision == decision, context
        assert request.status == (
            ApprovalStatus.REJECTED if decision == "reject" else ApprovalStatus.APPROVED
        ), context
        assert request.reviewer_notes == winner["name"], context
        assert loser["code"] == "ALREADY_DECIDED", context
        assert loser["message"] == (
            f"already decided by {winner['user']} at {request.responded_at.isoformat()} "
            f"({decision})"
        ), context

        audit = AuditRecord.objects.filter(
            action=AuditAction.APPROVAL_DECIDED, object_id=str(request.pk)
        )
        assert audit.count() == 1, context
        assert audit.get().actor_name == winner["user"], context
        events = RunEvent.objects.filter(trace_id=request.trace_id, type="approval.decided")
        assert events.count() == 1, context
        # The run was woken once, by the decision that was taken.
        assert Run.objects.get(pk=request.run_id).status == RunStatus.RUNNING, context

    assert not Approval.objects.filter(pk__in=[r.pk for r in requests], status="PENDING").exists()
    # A process the machine put aside for a moment makes a round that raced nobody; most
    # rounds must have been real races.
    together = sum(gap < TOGETHER_S for gap in apart)
    assert together >= ROUNDS // 2, (apart, processes.tails())
    print(
        f"{together} of {ROUNDS} rounds started within {TOGETHER_S * 1000:g} ms "
        f"(gaps {[round(gap * 1000, 1) for gap in apart]} ms); decided by {winners}"
    )
