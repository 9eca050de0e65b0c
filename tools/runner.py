"""The registry's tool runner: the engine's `ToolRunner` port on the built-in adapters.

`invoke` does, in this order, and stops at the first refusal:

1. checks the arguments against the tool's declared function schema;
2. finds the adapter the tool's `implementation` names;
3. unless the call is sandboxed: the caller's permission for the tool (`tools/access.py`),
   the tool's secret from the vault (`tools/credentials.py`, for an adapter that sends one),
   the tool's rate limit (`tools/ratelimit.py`), then an OAuth2 token if the tool needs one;
4. runs the adapter (its sandbox when the call or the tool asks for one), and turns whatever
   it raises into a `ToolError` the retry policy understands: the adapter's own, or a
   retryable one naming only the exception's type, since an exception's text may carry a URL
   with a token or a connection string;
5. takes every echo of the call's credentials, in any encoding, out of what the adapter
   returned or raised (`governance/secret_redaction.py`), before anything stores it.

A sandboxed call has no external effect (it records the call and returns a realistic result),
so it is neither counted against the rate limit, which guards the real API's quota, nor
checked against the permission, which guards effects, nor given credentials it would not use.
Refusals before the adapter runs are permanent, except a rate limit (RATE_LIMITED, with
`retry_after_s`: the step waits its turn) and an unreachable rate-limit backend (retryable).

Call `invoke` outside a database transaction, as the engine does: the database rate limiter
holds its counter row locked until the transaction ends, and a rollback would give the call
back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from runs.engine.ports import (
    RATE_LIMITED,
    VALIDATION_ERROR,
    ToolError,
    ToolInvocation,
    ToolResult,
)
from tools.access import DEFAULT_ACCESS, ToolAccess
from tools.builtin import BUILTINS, Builtin, Replayed, ToolContext
from tools.builtin.base import check_arguments
from tools.credentials import DEFAULT_AUTHENTICATOR, Authenticator, Credentials
from tools.ratelimit import (
    InvalidRateLimit,
    RateLimiter,
    RateLimitUnavailable,
    rate_limit_key,
    rate_limiter,
)

logger = logging.getLogger(__name__)

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class RegistryToolRunner:
    """Runs registry tools through their built-in adapters."""

    def __init__(
        self,
        *,
        builtins: Mapping[str, Builtin] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        access: ToolAccess | None = None,
        authenticator: Authenticator | None = None,
        limiter: RateLimiter | None = None,
        before_waiting: Callable[[], None] | None = None,
    ):
        """`access` and `authenticator` default to the process's shared ones (their caches
        serve every runner); `limiter` to the backend the settings choose at each call.
        `before_waiting` is called just before an adapter that waits on the network runs (the
        engine's wiring hands the thread's database connection back to the pool there)."""
        self.builtins = BUILTINS if builtins is None else builtins
        self.clock = clock
        self.access = DEFAULT_ACCESS if access is None else access
        self.authenticator = DEFAULT_AUTHENTICATOR if authenticator is None else authenticator
        self.limiter = limiter
        self.before_waiting = before_waiting

    def invoke(self, invocation: ToolInvocation) -> ToolResult:
        """Run one call; raise ToolError (permanent or not) when it fails."""
        tool = invocation.tool
        tool_id = str(tool.get("tool_id", "?"))
        function_schema = tool.get("function_schema") or {}
        parameters = function_schema.get("parameters") or _ANY_OBJECT
        check_arguments(parameters, invocation.arguments, tool_id=tool_id)
        builtin = self._builtin(tool, tool_id)
        sandboxed = invocation.sandbox or bool(tool.get("sandbox_mode"))
        credentials = None
        if sandboxed:
            adapter = builtin.sandbox
        else:
            adapter = builtin.run
            credentials = self._admit(invocation, builtin, tool_id)
        context = ToolContext(
            tool=tool,
            idempotency_key=invocation.idempotency_key,
            workspace_id=invocation.workspace_id,
            run_id=invocation.run_id,
            credentials=credentials,
            traceparent=invocation.traceparent,
        )
        if self.before_waiting is not None and builtin.waits_on_network and not sandboxed:
            self.before_waiting()
        started = self.clock()
        try:
            output = adapter(invocation.arguments, context)
        except ToolError as exc:
            if credentials is None:
                raise
            # An error may quote what the server answered (a reason phrase, a body).
            raise ToolError(
                credentials.redact(str(exc)),
                permanent=exc.permanent,
                code=exc.code,
                retry_after_s=exc.retry_after_s,
            ) from None
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
        if credentials is not None:
            # The one place an echo of a credential is taken out, whatever the adapter and
            # however the server encoded it: every string and key of the decoded answer.
            output = credentials.redact(output)
        return ToolResult(
            output=_as_json(output, tool_id), latency_ms=latency_ms, replayed=replayed
        )

    def needs_approval(
        self, tool: Mapping[str, Any], workspace_id: int, caller_id: Any
    ) -> str | None:
        """Why a call of `tool` needs a person's approval first (an EXECUTE tool whose
        caller has no grant); None when it does not. Sandboxed calls never do."""
        if tool.get("sandbox_mode"):
            return None
        return self.access.lacks_grant(dict(tool), workspace_id, caller_id)

    def _admit(
        self, invocation: ToolInvocation, builtin: Builtin, tool_id: str
    ) -> Credentials | None:
        """Permission, secret, rate limit, token: raise the first refusal; else the
        credentials the adapter sends (None for a tool without authentication)."""
        tool = invocation.tool
        self.access.check(invocation, tool_id=tool_id)
        prepared = None
        if builtin.sends_credentials:
            # Before the rate limit: a secret that is missing must not spend the quota.
            prepared = self.authenticator.prepare(
                tool, workspace_id=invocation.workspace_id, tool_id=tool_id
            )
        limits = tool.get("rate_limit")
        if limits:
            self._acquire(invocation.workspace_id, tool_id, limits)
        if prepared is None:
            return None
        return self.authenticator.credentials(prepared, tool_id=tool_id)

    def _acquire(self, workspace_id: int, tool_id: str, limits: Any) -> None:
        try:
            limiter = self.limiter if self.limiter is not None else rate_limiter()
            decision = limiter.acquire(rate_limit_key(workspace_id, tool_id), limits)
        except InvalidRateLimit as exc:
            raise ToolError(
                f"tool {tool_id}: {exc}", permanent=True, code=VALIDATION_ERROR
            ) from None
        except RateLimitUnavailable as exc:
            raise ToolError(f"tool {tool_id}: {exc}; it may succeed if tried again") from None
        if not decision.allowed:
            name = decision.limit_name
            limit = limits.get(name) if name else None
            raise ToolError(
                f"tool {tool_id}: {name} {limit} reached; next call in "
                f"{decision.retry_after_s:.1f} s",
                code=RATE_LIMITED,
                retry_after_s=decision.retry_after_s,
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
