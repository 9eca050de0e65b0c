"""The engine's ports: what it asks of the world, as Protocols and plain data.

The engine imports nothing outside itself (the standard library, and jsonschema, referencing,
re2, json_logic and cryptography). The model gateway (`runs/gateway.py`), the tool runner
(`tools/runner.py`), the run store (`runs/store.py`) and safety screening
(`governance/safety.py`) implement these on the real parts; tests may use in-memory ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runs.engine import hitl
    from runs.engine.definition import Definition
    from runs.engine.limits import LimitReached
    from runs.engine.state import ChildOutcome, ChildRequest, Events, RunView, StepRecord

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
    """Where the engine takes the time from: step starts, deadlines, handoff windows."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class Cipher(Protocol):
    """pii_handling ENCRYPT's key (the credential vault's on the server): URL-safe tokens."""

    def encrypt(self, text: str) -> str: ...

    def decrypt(self, token: str) -> str: ...


Encrypt = Callable[[str], str]
Decrypt = Callable[[str], str]

# pii_handling's modes (seed 000 §3.7.3).
PII_ALLOW = "ALLOW"
PII_REDACT = "REDACT"
PII_ENCRYPT = "ENCRYPT"


class Flag(Protocol):
    """What a content filter found, as the engine reports it: which filter and what kind
    (never the flagged text)."""

    @property
    def filter(self) -> str: ...

    @property
    def kind(self) -> str: ...


class ScreeningError(Exception):
    """A screen that could not give its verdict (the bias judge answered something else)."""


class Screening(Protocol):
    """Safety screening (`governance/safety.py`): the entity's content filters on a model's
    output, and pii_handling on every copy of a run's data that a log or a store keeps.

    Values are JSON values; the pii_* functions map over every string in them."""

    def scan_many(self, texts: Sequence[str], filters: Iterable[str]) -> Sequence[Sequence[Flag]]:
        """What `filters` (TOXICITY, PII, PROFANITY; not BIAS) find in each of `texts`."""
        ...

    def redact_value(self, value: Any, filters: Iterable[str]) -> Any:
        """`value` with what `filters` find in its strings replaced by `[REDACTED:KIND]`."""
        ...

    def bias_judge_request(self, text: str, *, provider: str, model: str) -> ModelRequest:
        """The LLM-judge call asking whether `text` is biased."""
        ...

    def bias_verdict(self, reply: ModelReply, *, text: str) -> Flag | None:
        """A BIAS flag when the judge's reply says `text` is biased; ScreeningError when the
        reply is not a verdict."""
        ...

    def pii_protect(self, value: Any, mode: str, encrypt: Encrypt | None) -> Any:
        """A copy a person reads and nothing reads back, as pii_handling `mode` says."""
        ...

    def pii_reveal(self, value: Any, decrypt: Decrypt) -> Any:
        """`pii_protect`'s ENCRYPT copy with its tokens decrypted."""
        ...

    def pii_seal(self, value: Any, mode: str, encrypt: Encrypt | None) -> Any:
        """A copy the engine reads back later (`pii_open` turns it back)."""
        ...

    def pii_open(self, value: Any, decrypt: Decrypt | None) -> Any:
        """The clear value of a sealed copy (pieces redacted for good stay redacted)."""
        ...


class LeaseLost(Exception):
    """Another worker holds the run now (this one was too slow): stop without writing.
    `wake`: a run that needs a look from any worker (the store could not take it).

    This one stays an exception, unlike a step's outcome: it is the store saying the run is
    no longer this worker's, an abort of the whole `advance` from wherever it is raised, not
    a result the driver acts on."""

    def __init__(self, message: str = "", *, wake: str | None = None):
        super().__init__(message)
        self.wake = wake


class RunStore(Protocol):
    def load(self, run_id: str) -> RunView | None:
        """Claim the run's lease and read it; None when it is finished or someone holds it."""

    def save(self, run: RunView, *, steps: list[StepRecord], events: Events) -> None:
        """Persist the run, step records and events in one commit."""

    def spawn(
        self,
        run: RunView,
        *,
        children: list[ChildRequest],
        steps: list[StepRecord],
        events: Events,
        adopt: bool = False,
    ) -> list[str]:
        """Create child runs of the current step (pinned to each child's current version),
        leave the run WAITING and persist, in one commit; answer the children's ids. With
        `adopt`, the first child is created leased to this store's worker, which goes on
        with it (`taken`)."""

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        """The outcomes of the current group's child runs; None while one is unfinished."""

    def finish(
        self, run: RunView, *, steps: list[StepRecord], events: Events, adopt: bool = False
    ) -> str | None:
        """Persist a terminal run; answer the parent's id when this was the last unfinished
        child of the parent's current step. With `adopt`, the same commit takes the parent's
        lease for this store's worker when it can (`taken` says whether it did)."""

    def taken(self, run_id: str) -> bool:
        """Whether this store holds the run's lease for its worker, from `spawn` or `finish`
        with `adopt`: `load` answers it without claiming it again."""

    def let_go(self, run_id: str) -> None:
        """Give back the lease of a run `taken` and not advanced (another worker may claim
        it at once)."""

    def release(self, run: RunView) -> None: ...

    def cancel_requested(self, run: RunView) -> bool:
        """Whether someone asked the run to stop since it was loaded."""

    def schedule(
        self, run: RunView, delay_s: float, *, steps: list[StepRecord], events: Events
    ) -> None:
        """Persist the run with a due time `delay_s` from now; nothing advances it before."""

    def recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None: ...

    def record_model_call(
        self,
        run: RunView,
        step: StepRecord,
        call_key: str,
        request: ModelRequest,
        reply: ModelReply,
        *,
        reserved: Decimal | None = None,
    ) -> None: ...

    def recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None: ...

    def record_tool_call(
        self,
        run: RunView,
        step: StepRecord,
        invocation: ToolInvocation,
        result: ToolResult | None,
        error: str = "",
        *,
        reserved: Decimal | None = None,
    ) -> None: ...

    def memory_read(self, run: RunView) -> list[Any]:
        """What the entity remembers, oldest first."""

    def memory_write(self, run: RunView, content: Any) -> None:
        """Remember one item under the entity's memory configuration."""

    def artifacts(self, run: RunView) -> Any:
        """The ArtifactStore of the run's workspace."""

    def child_definition(self, run: RunView, entity_ref: str) -> Definition | None:
        """The current definition of a child entity of this run's workspace, for its input
        schema; None when it no longer exists."""

    def children_definitions(self, run: RunView, refs: list[str]) -> dict[str, Definition]:
        """`child_definition` for several references at once."""

    def reserve_call(
        self, run: RunView, *, llm_calls: int = 0, tool_calls: int = 0, estimate: Decimal
    ) -> LimitReached | None:
        """Before a call: count it for the run and every ancestor and set its estimated cost
        aside at the run's budget anchor, all or nothing; answer why not when a call limit
        or the budget has no room (nothing is written then). `record_model_call` and
        `record_tool_call` with `reserved` settle it; `unreserve_call` gives it back."""

    def unreserve_call(self, run: RunView, estimate: Decimal) -> None:
        """A reserved call that failed before it cost anything gives its estimate back."""

    def cancel_descendants(self, run: RunView) -> list[str]:
        """Ask every unfinished descendant to stop; answer the ids to hint."""

    def approval_verdict(self, run: RunView, key: str) -> hitl.ApprovalVerdict | None:
        """What became of the run's request `key`; None when it was never asked."""

    def request_approval(
        self, run: RunView, ask: hitl.ApprovalAsk, *, steps: list[StepRecord], events: Events
    ) -> None:
        """Record the request; when it needs a decision, persist the run PAUSED with the
        steps and events in the same commit (the store lets go of the lease). People are
        told after commit."""

    def record_judge(self, run: RunView, key: str, verdict: dict[str, Any]) -> None:
        """Keep an LLM judge's verdict once (a replay finds it kept)."""

    def awaiting_person(self, run: RunView) -> bool:
        """Whether a request of the run's trace waits on a person."""
