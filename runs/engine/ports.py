"""The engine's ports: what it asks of the world, as Protocols and plain data.

The engine imports no Django and no litellm. The model gateway (`runs/gateway.py`), the tool
runner (`tools/runner.py`) and the run store (`runs/store.py`) implement these on the real
parts; tests may use in-memory ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

# Error codes of the seed's families (seed 001 §A.6), used in run errors and step failures.
INVALID_INPUT = "INVALID_INPUT"
VALIDATION_ERROR = "VALIDATION_ERROR"
TOOL_FAILURE = "TOOL_FAILURE"
LLM_ERROR = "LLM_ERROR"
TIMEOUT = "TIMEOUT"
LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
NOT_ACTIVE = "NOT_ACTIVE"
CANCELLED = "CANCELLED"
REJECTED = "REJECTED"
PERMISSION_DENIED = "PERMISSION_DENIED"
RATE_LIMITED = "RATE_LIMITED"
INTERNAL_ERROR = "INTERNAL_ERROR"


@dataclass(frozen=True)
class ModelRequest:
    """One call to a model, provider-neutral.

    `response_schema` asks for a JSON object valid against that JSON Schema; `tools` offers
    function definitions (OpenAI format: {"name", "description", "parameters"}) and
    `tool_choice` names the one the model must call. `purpose` says why the engine asks
    (THOUGHT, PLAN, JUDGE, TOOL_ARGUMENTS, SUMMARY) and is recorded with the call.
    """

    provider: str
    model: str
    messages: tuple[dict[str, Any], ...]
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int | None = None
    response_schema: dict[str, Any] | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | None = None
    purpose: str = "THOUGHT"
    reasoning_mode: str = ""
    api_base: str | None = None
    api_key: str | None = None


@dataclass(frozen=True)
class ModelReply:
    """What a model answered, with what it cost.

    `parsed` is the JSON object when one was asked for (response_schema) and the answer
    decoded; `tool_arguments` the arguments of the function it called, decoded.
    """

    content: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Decimal
    latency_ms: int
    provider: str
    model: str
    parsed: Any = None
    tool_name: str | None = None
    tool_arguments: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict)


class ModelError(Exception):
    """A model call that failed: LLM_ERROR (provider, network, unparsable answer) or TIMEOUT.

    `retryable` says whether the same call may succeed if tried again.
    """

    def __init__(self, message: str, *, code: str = LLM_ERROR, retryable: bool = True):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class ModelClient(Protocol):
    def complete(self, request: ModelRequest) -> ModelReply: ...

    def count_tokens(self, model: str, text: str) -> int: ...


@dataclass(frozen=True)
class ToolInvocation:
    """One call of a registry tool with validated arguments.

    `idempotency_key` is `run_id:step_key:attempt` (plus `:call_index` when a step calls the
    same tool more than once); a WRITE/EXECUTE tool replayed with a key already executed
    returns the recorded result without acting again.
    """

    tool: dict[str, Any]  # the tool's definition in the exchange format (tool.json)
    arguments: dict[str, Any]
    idempotency_key: str
    workspace_id: int
    run_id: str
    sandbox: bool = False
    caller_id: Any = None  # the user who started the run's trace (None: a system run)
    # Who approved this one call in the inbox (an EXECUTE tool without a standing grant).
    approved_by: Any = None


@dataclass(frozen=True)
class ToolResult:
    output: Any
    latency_ms: int
    replayed: bool = False


class ToolError(Exception):
    """A tool call that failed. `permanent` failures are not retried (bad arguments, a
    forbidden host); others (a timeout, a 503) may be, under the entity's retry policy."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        code: str = TOOL_FAILURE,
        retry_after_s: float | None = None,
    ):
        super().__init__(message)
        self.permanent = permanent
        self.code = code
        # A rate limit says when the call may be made: the step waits that long and tries
        # again without spending an attempt of the retry policy.
        self.retry_after_s = retry_after_s


class ToolRunner(Protocol):
    def invoke(self, invocation: ToolInvocation) -> ToolResult: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...
