"""The registry's tool runner: the engine's `ToolRunner` port on the built-in adapters.

`invoke` checks the arguments against the tool's declared function schema before anything
else, routes to the adapter the tool's `implementation` names (its sandbox when the call or the
tool asks for one), and turns whatever an adapter raises into a `ToolError` the retry policy
understands: the adapter's own, or a retryable one naming only the exception's type, since an
exception's text may carry a URL with a token or a connection string.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from runs.engine.ports import ToolError, ToolInvocation, ToolResult
from tools.builtin import BUILTINS, Builtin, Replayed, ToolContext
from tools.builtin.base import check_arguments

logger = logging.getLogger(__name__)

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class RegistryToolRunner:
    """Runs registry tools through their built-in adapters."""

    def __init__(
        self,
        *,
        builtins: Mapping[str, Builtin] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.builtins = BUILTINS if builtins is None else builtins
        self.clock = clock

    def invoke(self, invocation: ToolInvocation) -> ToolResult:
        """Run one call; raise ToolError (permanent or not) when it fails."""
        tool = invocation.tool
        tool_id = str(tool.get("tool_id", "?"))
        function_schema = tool.get("function_schema") or {}
        parameters = function_schema.get("parameters") or _ANY_OBJECT
        check_arguments(parameters, invocation.arguments, tool_id=tool_id)
        builtin = self._builtin(tool, tool_id)
        sandboxed = invocation.sandbox or bool(tool.get("sandbox_mode"))
        adapter = builtin.sandbox if sandboxed else builtin.run
        context = ToolContext(
            tool=tool,
            idempotency_key=invocation.idempotency_key,
            workspace_id=invocation.workspace_id,
            run_id=invocation.run_id,
        )
        started = self.clock()
        try:
            output = adapter(invocation.arguments, context)
        except ToolError:
            raise
        except Exception as exc:
            logger.warning("tool %s (%s) raised %s", tool_id, builtin.name, type(exc).__name__)
            logger.debug("tool %s failure", tool_id, exc_info=True)
            raise ToolError(
                f"tool {tool_id} failed unexpectedly ({type(exc).__name__}); it may succeed "
                "if tried again"
            ) from None
        latency_ms = max(0, round((self.clock() - started) * 1000))
        replayed = isinstance(output, Replayed)
        if replayed:
            output = output.output
        return ToolResult(
            output=_as_json(output, tool_id), latency_ms=latency_ms, replayed=replayed
        )

    def _builtin(self, tool: Mapping[str, Any], tool_id: str) -> Builtin:
        name = tool.get("implementation")
        choices = ", ".join(sorted(self.builtins))
        if not name:
            raise ToolError(
                f"tool {tool_id} has no implementation; set implementation to one of: {choices}",
                permanent=True,
            )
        builtin = self.builtins.get(name)
        if builtin is None:
            raise ToolError(
                f"tool {tool_id} names implementation {name!r}, which is not a built-in; "
                f"use one of: {choices}",
                permanent=True,
            )
        return builtin


def _as_json(output: Any, tool_id: str) -> Any:
    """The output exactly as it will be stored and replayed (tuples become lists, no NaN)."""
    try:
        return json.loads(json.dumps(output, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ToolError(
            f"tool {tool_id} returned a result that is not JSON ({exc})", permanent=True
        ) from None
