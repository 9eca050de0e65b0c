"""The engine wired to the real parts: the ORM store (with the approvals app's desk), the
litellm gateway, the tool runner, the executors."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

from django.conf import settings

from governance.safety import SafetyScreening
from governance.vault import PiiCipher
from runs.approval_desk import approval_desk
from runs.engine.core import Engine
from runs.engine.ports import ModelClient, ModelReply, ModelRequest
from runs.executors import check_after_waiting, enqueue, enqueue_at, release_before_waiting
from runs.gateway import LiteLLMGateway
from runs.store import OrmRunStore
from tools.runner import RegistryToolRunner

_shared = threading.local()


class ReleasingModel:
    """The model client, handing this thread's database connection back to the pool before
    each call (`runs.executors.release_before_waiting`): a thread waiting seconds on a model
    holds no connection, so a worker's threads share a few. Its next query takes one again,
    checked after a long wait (`runs.executors.check_after_waiting`)."""

    def __init__(self, model: ModelClient) -> None:
        self.model = model

    def complete(self, request: ModelRequest) -> ModelReply:
        release_before_waiting()
        started = time.monotonic()
        try:
            return self.model.complete(request)
        finally:
            check_after_waiting(time.monotonic() - started)

    def count_tokens(self, model: str, text: str) -> int:
        return self.model.count_tokens(model, text)

    def estimate_cost(self, request: ModelRequest) -> Decimal:
        return self.model.estimate_cost(request)  # type: ignore[attr-defined, no-any-return]


def parts() -> tuple[Any, Any]:
    """This thread's model client and tool runner, each letting go of the thread's database
    connection before it waits outside the database (a model; a tool on the network)."""
    if not hasattr(_shared, "parts"):
        _shared.parts = (
            ReleasingModel(LiteLLMGateway()),
            RegistryToolRunner(before_waiting=release_before_waiting),
        )
    return _shared.parts


def engine() -> Engine:
    """An engine for this thread: the gateway and tool runner are reused, the store (which
    carries the lease owner) is new for each call."""
    model, tools = parts()
    return Engine(
        store=OrmRunStore(approvals=approval_desk()),
        model=model,
        tools=tools,
        enqueue=enqueue,
        enqueue_later=enqueue_at,
        screening=SafetyScreening(),
        hard_cap=settings.HIERARCH_ENGINE["MAX_PASSES"],
        max_tool_turns=settings.HIERARCH_ENGINE["MAX_TOOL_TURNS"],
        cipher=PiiCipher(),
        handoff_s=settings.HIERARCH_ENGINE["HANDOFF_SECONDS"],
    )
