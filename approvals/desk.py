"""The approvals app's side of runs/approval_desk.py: what the run store and the run
services ask of approvals, answered by this app's services and selectors."""

from __future__ import annotations

from typing import Any

from approvals.selectors import (
    approval_decided,
    approval_first_open_in_trace,
    approval_waits_of_runs,
    approvals_of_run,
    approvals_open_by_run,
    approvals_open_in_trace,
    approvals_open_traces,
)
from approvals.services import approval_close_for_runs, approval_judge_record, approval_request
from runs.approval_desk import ApprovalRequest, Decided, HumanWait, RequestShown


class Desk:
    """runs.approval_desk.ApprovalDesk, installed by ApprovalsConfig.ready."""

    def request(self, request: ApprovalRequest) -> int:
        return approval_request(request).pk

    def decided(self, *, run_id: str, key: str) -> Decided | None:
        return approval_decided(run_id=run_id, key=key)

    def any_open(self, *, trace_id: str) -> bool:
        return approvals_open_in_trace(trace_id=trace_id)

    def open_traces(self) -> Any:
        return approvals_open_traces()

    def requests_of_run(self, *, run_id: Any) -> list[RequestShown]:
        return approvals_of_run(run_id=run_id)

    def waits_of_runs(self, *, trace_id: Any, run_ids: list[Any]) -> list[HumanWait]:
        return approval_waits_of_runs(trace_id=trace_id, run_ids=run_ids)

    def first_open(self, *, trace_id: Any) -> RequestShown | None:
        return approval_first_open_in_trace(trace_id=trace_id)

    def open_by_run(self, *, trace_id: Any) -> dict[str, RequestShown]:
        return approvals_open_by_run(trace_id=trace_id)

    def judge_record(self, *, run_id: str, key: str, verdict: dict[str, Any]) -> None:
        approval_judge_record(run_id=run_id, key=key, verdict=verdict)

    def close_for_runs(self, run_ids: list[Any]) -> int:
        return approval_close_for_runs(run_ids)
