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

`prepare` does steps 1 to 3 and hands back the call ready to be made (`PreparedCall`), and
`call_all` makes several of them at once where they wait on the network: the reasoning loop
runs the READ calls a model asks for in one turn that way (runs/engine/tool_steps.py).

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
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from runs.engine.ports import (
    RATE_LIMITED,
    VALIDATION_ERROR,
    ToolError,
    ToolInvocation,
    ToolResult,
)
from runs.engine.storable import storable
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
        prepared = self.prepare(invocation)
        if self.before_waiting is not None and prepared.waits_on_network:
            self.before_waiting()
        return prepared.call()

    def prepare(self, invocation: ToolInvocation) -> PreparedCall:
        """Steps 1 to 3 on the caller's thread (they read the database, the vault and the
        rate limiter): the call itself comes back ready to be made, on any thread. Raises
        the first refusal as `invoke` does."""
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
        return PreparedCall(
            adapter=adapter,
            arguments=invocation.arguments,
            context=context,
            credentials=credentials,
            tool_id=tool_id,
            builtin_name=builtin.name,
            clock=self.clock,
            waits_on_network=builtin.waits_on_network and not sandboxed,
        )

    def call_all(self, prepared: list[PreparedCall]) -> list[ToolResult | ToolError]:
        """Make several prepared calls (READ calls a model asked for in one turn): at the
        same time when two or more wait on the network, each on a thread of a small shared
        pool, else one after the other; each call's result or error, in their order. The
        caller's database connection goes back to the pool first, as for one call."""
        waiting = sum(1 for call in prepared if call.waits_on_network)
        if waiting and self.before_waiting is not None:
            self.before_waiting()
        if waiting < 2:
            return [_outcome(call) for call in prepared]
        return list(_call_pool().map(_outcome, prepared))

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


@dataclass(frozen=True)
class PreparedCall:
    """A call admitted by `RegistryToolRunner.prepare`: `call()` runs its adapter (on any
    thread: it touches no database) and takes every echo of its credentials out of what
    comes back."""

    adapter: Callable[[dict[str, Any], ToolContext], Any]
    arguments: dict[str, Any]
    context: ToolContext
    credentials: Credentials | None
    tool_id: str
    builtin_name: str
    clock: Callable[[], float]
    waits_on_network: bool

    def call(self) -> ToolResult:
        started = self.clock()
        try:
            output = self.adapter(self.arguments, self.context)
        except ToolError as exc:
            if self.credentials is None:
                raise
            # An error may quote what the server answered (a reason phrase, a body).
            raise ToolError(
                self.credentials.redact(str(exc)),
                permanent=exc.permanent,
                code=exc.code,
                retry_after_s=exc.retry_after_s,
            ) from None
        except Exception as exc:
            logger.warning(
                "tool %s (%s) raised %s", self.tool_id, self.builtin_name, type(exc).__name__
            )
            logger.debug("tool %s failure", self.tool_id, exc_info=True)
            raise ToolError(
                f"tool {self.tool_id} failed unexpectedly ({type(exc).__name__}); it may "
                "succeed if tried again"
            ) from None
        latency_ms = max(0, round((self.clock() - started) * 1000))
        replayed = isinstance(output, Replayed)
        if replayed:
            output = output.output
        if self.credentials is not None:
            # The one place an echo of a credential is taken out, whatever the adapter and
            # however the server encoded it: every string and key of the decoded answer.
            output = self.credentials.redact(output)
        return ToolResult(
            output=_as_json(output, self.tool_id), latency_ms=latency_ms, replayed=replayed
        )


def _outcome(call: PreparedCall) -> ToolResult | ToolError:
    try:
        return call.call()
    except ToolError as exc:
        return exc


_POOL_THREADS = 8  # READ calls of one turn in flight at once, per process
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _call_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=_POOL_THREADS, thread_name_prefix="hierarch-tool"
            )
        return _pool


def _as_json(output: Any, tool_id: str) -> Any:
    """The output exactly as it will be stored and replayed (tuples become lists, no NaN)."""
    try:
        # Text the database cannot store (NUL, a lone surrogate) is replaced, not refused.
        return storable(json.loads(json.dumps(output, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise ToolError(
            f"tool {tool_id} returned a result that is not JSON ({exc})", permanent=True
        ) from None
