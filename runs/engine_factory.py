"""The engine wired to the real parts: the ORM store (with the approvals app's desk), the
litellm gateway, the tool runner, the executors."""

from __future__ import annotations

import threading

from django.conf import settings

from governance.safety import SafetyScreening
from governance.vault import PiiCipher
from runs.approval_desk import approval_desk
from runs.engine.core import Engine
from runs.executors import enqueue, enqueue_at
from runs.gateway import LiteLLMGateway
from runs.store import OrmRunStore
from tools.runner import RegistryToolRunner

_shared = threading.local()


def engine() -> Engine:
    """An engine for this thread: the gateway and tool runner are reused, the store (which
    carries the lease owner) is new for each call."""
    if not hasattr(_shared, "parts"):
        _shared.parts = (LiteLLMGateway(), RegistryToolRunner())
    model, tools = _shared.parts
    return Engine(
        store=OrmRunStore(approvals=approval_desk()),
        model=model,
        tools=tools,
        enqueue=enqueue,
        enqueue_later=enqueue_at,
        screening=SafetyScreening(),
        hard_cap=settings.HIERARCH_ENGINE["MAX_PASSES"],
        cipher=PiiCipher(),
        handoff_s=settings.HIERARCH_ENGINE["HANDOFF_SECONDS"],
    )
