"""What both stores share: the port's typed requests dispatched to one method each.

`recall`, `record` and `signals` take a kind of key, of record or of question (runs/engine/
ports.py); a store implements one plain method per kind (`DispatchingStore`'s abstract
methods) and this base sends each request to it, so the dispatch is written once and a new
kind is added here and in each store's one method, never in two copies of the switch.
"""

from __future__ import annotations

import abc
from typing import Any, overload

from runs.engine.hitl import ApprovalVerdict
from runs.engine.ports import (
    JudgeVerdict,
    MemoryEntries,
    MemoryEntry,
    MemoryFolded,
    MemoryQuery,
    ModelCall,
    ModelReply,
    Record,
    Remembered,
    ReplyKey,
    ResultKey,
    Signals,
    ToolCall,
    ToolResult,
)
from runs.engine.state import RunView


class DispatchingStore(abc.ABC):
    """The typed requests of the `RunStore` port, each sent to the store's own method."""

    @overload
    def recall(self, run: RunView, key: ReplyKey) -> ModelReply | None: ...

    @overload
    def recall(self, run: RunView, key: ResultKey) -> ToolResult | None: ...

    @overload
    def recall(self, run: RunView, key: MemoryQuery) -> list[Any]: ...

    @overload
    def recall(self, run: RunView, key: MemoryEntries) -> list[MemoryEntry]: ...

    def recall(
        self, run: RunView, key: ReplyKey | ResultKey | MemoryQuery | MemoryEntries
    ) -> ModelReply | ToolResult | list[Any] | list[MemoryEntry] | None:
        if isinstance(key, ReplyKey):
            return self._recorded_reply(run, key.key)
        if isinstance(key, ResultKey):
            return self._recorded_tool_result(run, key.key)
        if isinstance(key, MemoryEntries):
            return self._memory_entries(key)
        return self._memory_read(key)

    def record(self, run: RunView, record: Record) -> RunView:
        if isinstance(record, ModelCall):
            return self._record_model_call(run, record)
        if isinstance(record, ToolCall):
            return self._record_tool_call(run, record)
        if isinstance(record, JudgeVerdict):
            self._record_judge(run, record.key, record.verdict)
        elif isinstance(record, MemoryFolded):
            self._memory_fold(run, record)
        else:
            self._memory_write(run, record)
        return run

    def signals(
        self,
        run: RunView,
        *,
        cancel: bool = False,
        approval: str | None = None,
        person: bool = False,
    ) -> Signals:
        if cancel:
            run = self._cancel_requested(run)
        return Signals(
            run=run,
            cancel_requested=run.cancel_requested,
            verdict=self._approval_verdict(run, approval) if approval is not None else None,
            awaiting_person=self._awaiting_person(run) if person else False,
        )

    @abc.abstractmethod
    def _recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None:
        """The reply of the run's call recorded under `call_key`, if it was made."""

    @abc.abstractmethod
    def _recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None:
        """The result of the run's tool call recorded under `key`, if it was made."""

    @abc.abstractmethod
    def _memory_read(self, query: MemoryQuery) -> list[Any]:
        """A memory scope's items, newest first."""

    @abc.abstractmethod
    def _record_model_call(self, run: RunView, call: ModelCall) -> RunView:
        """Keep a model call, in its own commit; the run as written."""

    @abc.abstractmethod
    def _record_tool_call(self, run: RunView, call: ToolCall) -> RunView:
        """Keep a tool call, in its own commit; the run as written."""

    @abc.abstractmethod
    def _record_judge(self, run: RunView, key: str, verdict: dict[str, Any]) -> None:
        """Keep a judge's verdict."""

    @abc.abstractmethod
    def _memory_entries(self, query: MemoryEntries) -> list[MemoryEntry]:
        """A memory scope's items with their ids, newest first, past the newest `skip`."""

    @abc.abstractmethod
    def _memory_write(self, run: RunView, item: Remembered) -> None:
        """Keep a memory item (once per run)."""

    @abc.abstractmethod
    def _memory_fold(self, run: RunView, fold: MemoryFolded) -> None:
        """Fold memory items into one, all or nothing; then keep the newest `fold.keep`."""

    @abc.abstractmethod
    def _cancel_requested(self, run: RunView) -> RunView:
        """The run with its cancel flag: whether a cancel of it was asked, read now."""

    @abc.abstractmethod
    def _approval_verdict(self, run: RunView, key: str) -> ApprovalVerdict | None:
        """The verdict on the run's request `key`, once there is one."""

    @abc.abstractmethod
    def _awaiting_person(self, run: RunView) -> bool:
        """Whether a request of the run's trace waits on a person."""
