"""The engine's ports: what it asks of the world, as Protocols and plain data.

The engine imports nothing outside itself (the standard library, and jsonschema, referencing,
re2, json_logic and cryptography). The model gateway (`runs/gateway.py`), the tool runner
(`tools/runner.py`), the run store (`runs/store.py`) and safety screening
(`governance/safety.py`) implement these on the real parts; tests may use in-memory ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, overload

from runs.engine.state import ChildOutcome, ChildRequest, Events, RunView, StepRecord

if TYPE_CHECKING:
    from runs.engine import hitl
    from runs.engine.definition import Definition
    from runs.engine.limits import LimitReached

# Error codes of the seed's families (seed 001 §A.6), used in run errors and step failures.
INVALID_INPUT = "INVALID_INPUT"
VALIDATION_ERROR = "VALIDATION_ERROR"
TOOL_FAILURE = "TOOL_FAILURE"
LLM_ERROR = "LLM_ERROR"
TIMEOUT = "TIMEOUT"
LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
MAX_PASSES_EXHAUSTED = "MAX_PASSES_EXHAUSTED"
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
    `traceparent` is the W3C header a provider that continues traces is sent ("" for none:
    runs/engine/observability.py); it is not part of the call's record.
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
    traceparent: str = ""

    def traced(self, traceparent: str) -> ModelRequest:
        """The request with its `traceparent`: what `dataclasses.replace` answers, without
        running `__init__` again (a step's every model call is made through it)."""
        if traceparent == self.traceparent:
            return self
        request = object.__new__(ModelRequest)
        request.__dict__.update(self.__dict__, traceparent=traceparent)
        return request


@dataclass(frozen=True)
class ModelReply:
    """What a model answered, with what it cost.

    `parsed` is the JSON object when one was asked for (response_schema) and the answer
    decoded; `tool_arguments` the arguments of the function it called, decoded. A model may
    call several functions in one answer: `tool_calls` holds them all, in order, each
    {"id", "name", "arguments"} (arguments decoded); `tool_name` and `tool_arguments` are
    the first's.
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
    tool_calls: tuple[dict[str, Any], ...] = ()

    def calls(self) -> tuple[dict[str, Any], ...]:
        """Every function the model called, in order (a reply recorded before `tool_calls`
        existed answers its one call)."""
        if self.tool_calls:
            return self.tool_calls
        if self.tool_name is None:
            return ()
        return ({"id": "call_0", "name": self.tool_name, "arguments": self.tool_arguments or {}},)


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
    # The W3C traceparent a tool that calls out sends ("" for none:
    # runs/engine/observability.py).
    traceparent: str = ""


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


# -- what the driver hands the store --------------------------------------------------------
#
# A transition is one commit of a run: the view the driver hands over (its row as the engine
# would have it), the step records and the events, and what kind of change it is. The store
# writes it, decides nothing, and answers the view as written (`Committed.run`).


@dataclass(frozen=True)
class Save:
    """The run as it is now (RUNNING, BLOCKED, a new pass…)."""

    steps: list[StepRecord] = field(default_factory=list)
    events: Events = field(default_factory=Events)


@dataclass(frozen=True)
class Schedule:
    """The run with a due time `delay_s` from now; nothing advances it before."""

    delay_s: float
    steps: list[StepRecord] = field(default_factory=list)
    events: Events = field(default_factory=Events)


@dataclass(frozen=True)
class Spawn:
    """Child runs of the current step (pinned to each child's current version), the run
    left WAITING. With `adopt`, the first child is created leased to this store's worker.
    The store raises LimitReached, writing nothing, when the children do not fit: their
    budgets in the run's budget anchor, an entity's cumulative_cost_usd, or (hires) the
    workspace's monthly cost quota (runs/engine/limits.py `quota_hold`)."""

    children: list[ChildRequest]
    steps: list[StepRecord] = field(default_factory=list)
    events: Events = field(default_factory=Events)
    adopt: bool = False


@dataclass(frozen=True)
class Finish:
    """A terminal run. `stop_descendants`: its unfinished descendants are asked to stop
    first (a deadline passed). A run that ends failed or cancelled while subordinates it
    hired still run fires them (`hiring.fired_with`) and stops its descendants too.
    `forget`: a memory scope whose items go with the run (a root's SESSION). With `adopt`,
    the same commit takes the woken parent's lease for this store's worker when it can."""

    steps: list[StepRecord] = field(default_factory=list)
    events: Events = field(default_factory=Events)
    adopt: bool = False
    stop_descendants: bool = False
    forget: MemoryScope | None = None


@dataclass(frozen=True)
class Pause:
    """A request for a person (`ask`; the store prices it with
    `hitl.priced` from what it knows of the run). When it needs a decision, the run
    is written PAUSED with the steps and events and its lease let go, in the same commit;
    else only the request is kept and its event goes with the run's next write."""

    ask: hitl.ApprovalAsk
    steps: list[StepRecord] = field(default_factory=list)
    events: Events = field(default_factory=Events)


Transition = Save | Schedule | Spawn | Finish | Pause


@dataclass(frozen=True)
class Committed:
    """What a commit answers: the run as written (`run`: the records it buffered taken, the
    lease let go or the cancel flag read back), the children a Spawn created, the parent a
    Finish woke (the last unfinished child of its current step ended), the descendants asked
    to stop, and the run this worker now holds the lease of from that commit (`adopt`), if
    any."""

    run: RunView
    child_ids: tuple[str, ...] = ()
    woken: str | None = None
    stopped: tuple[str, ...] = ()
    taken: str | None = None


@dataclass(frozen=True)
class ReplyKey:
    """A model call's key: `run:step:iteration:attempt:index`."""

    key: str


@dataclass(frozen=True)
class ResultKey:
    """A tool call's idempotency key."""

    key: str


@dataclass(frozen=True)
class MemoryQuery:
    """The items of a memory scope, newest first, not expired at `now`, at most `limit`.
    `with_oldest`: when the limit leaves items out, the scope's oldest item (not expired)
    comes last too, where a fold of the memory keeps its summary."""

    scope: MemoryScope
    now: datetime
    limit: int | None = None
    with_oldest: bool = False


@dataclass(frozen=True)
class MemoryEntries:
    """The items of a memory scope with their ids, newest first, not expired at `now`, past
    the newest `skip` of them: what a fold of the memory may take."""

    scope: MemoryScope
    now: datetime
    skip: int = 0


@dataclass(frozen=True)
class MemoryEntry:
    """One memory item as a fold reads it: the store's id for it, and its content."""

    id: Any
    content: Any


@dataclass(frozen=True)
class MemoryScope:
    """Where a memory item lives (seed 000 §3.6.2): SESSION (the trace), ENTITY or GLOBAL."""

    workspace_id: int
    scope: str
    entity_id: Any = None
    session: str | None = None


@dataclass(frozen=True)
class ModelCall:
    """A model call as it returned, recorded at once in its own commit; `reserved` settles
    the estimate `reserve` set aside."""

    step: StepRecord
    key: str
    request: ModelRequest
    reply: ModelReply
    reserved: Decimal | None = None


@dataclass(frozen=True)
class ToolCall:
    """A tool call as it returned (`result`) or failed (`error`)."""

    step: StepRecord
    invocation: ToolInvocation
    result: ToolResult | None
    error: str = ""
    reserved: Decimal | None = None


@dataclass(frozen=True)
class JudgeVerdict:
    """An LLM judge's verdict on a review attempt, kept once (a replay finds it kept)."""

    key: str
    verdict: dict[str, Any]


@dataclass(frozen=True)
class Remembered:
    """One memory item: the store keeps it until `expires_at` and keeps only the newest
    `keep` items of its scope (the core worked both out from the retention policy). A run
    remembers once: when its scope already holds an item of the run (its end replayed after
    a crash), nothing is written."""

    scope: MemoryScope
    content: Any
    expires_at: datetime | None = None
    keep: int | None = None


@dataclass(frozen=True)
class MemoryFolded:
    """Items of a memory scope folded into one (a summary): the item `into` takes `content`
    (its place and expiry stay: it is the newest of those folded) and the items `others`
    go, all or nothing (nothing when one of them is gone: another run folded them first).
    Then only the newest `keep` items of the scope stay. `into` None: nothing is folded,
    only `keep` applies."""

    scope: MemoryScope
    into: Any = None
    others: tuple[Any, ...] = ()
    content: Any = None
    keep: int | None = None


Record = ModelCall | ToolCall | JudgeVerdict | Remembered | MemoryFolded


@dataclass(frozen=True)
class Signals:
    """What others did to the run since it was claimed, as asked: whether someone asked it
    to stop, what became of an approval request, whether a person holds up its trace.
    `run`: the view with the cancel flag as read."""

    run: RunView
    cancel_requested: bool = False
    verdict: hitl.ApprovalVerdict | None = None
    awaiting_person: bool = False


class Ids(Protocol):
    """Where new run ids come from (tests inject a counter: deterministic ids)."""

    def new_id(self) -> str: ...


class RandomIds:
    """Random UUIDs."""

    def new_id(self) -> str:
        return str(uuid.uuid4())


class RunStore(Protocol):
    """Storage only: claim a run, commit a transition, record and recall calls, read what
    the driver needs. Every rule (limits, memory windows, prices, payloads) is the core's."""

    def claim(self, run_id: str) -> RunView | None:
        """Take the run's lease and read it (or the run this store already holds from an
        adopting commit); None when it is finished or someone else holds it."""

    def commit(self, run: RunView, transition: Transition) -> Committed:
        """Write the transition with the records the engine buffered, in one commit, fenced
        on the lease (LeaseLost when another worker holds the run); the run as written is
        `Committed.run`."""

    def release(self, run: RunView) -> None:
        """The advance of a claimed run is over: give its lease back."""

    def let_go(self, run_id: str) -> None:
        """Give back the lease of a run an adopting commit took and that was not advanced
        (another worker may claim it at once)."""

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
        """A recorded model reply or tool result; or a memory scope's items (newest first),
        with their ids for `MemoryEntries`."""

    def record(self, run: RunView, record: Record) -> RunView:
        """Keep a model call, a tool call, a judge's verdict or a memory item (or fold
        memory items into one), in its own commit; answers the run as written (a call's
        commit takes the records the engine buffered)."""

    def reserve(
        self, run: RunView, *, llm_calls: int = 0, tool_calls: int = 0, estimate: Decimal
    ) -> LimitReached | None:
        """Before a call: count it for the run and every ancestor and set its estimated cost
        aside at the run's budget anchor, all or nothing; answer why not when a call limit
        or the budget has no room (nothing is written then). Recording the call with
        `reserved` settles it; `unreserve` gives it back."""

    def unreserve(self, run: RunView, estimate: Decimal) -> None:
        """A reserved call that failed before it cost anything gives its estimate back."""

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        """The outcomes of the current group's child runs; None while one is unfinished."""

    def definitions(self, run: RunView, refs: list[str]) -> dict[str, Definition]:
        """The definitions of child entities of the run's workspace, by reference, as the
        run's trace pinned them (its root's start): each child's newest version saved by
        then, or the newest its link's range allows (runs/engine/versions.py). One that no
        longer exists, or has no version the range allows, is left out."""

    def child_versions(self, run: RunView, ref: str) -> list[str] | None:
        """The versions of a child entity saved by the trace's pin, in the order they were
        saved (what a range was matched against); None when no entity answers to `ref`."""

    def signals(
        self,
        run: RunView,
        *,
        cancel: bool = False,
        approval: str | None = None,
        person: bool = False,
    ) -> Signals:
        """Read what was asked: the cancel flag (`cancel`), the verdict on the run's request
        `approval`, whether a request of the trace waits on a person (`person`)."""

    def artifacts(self, run: RunView) -> Any:
        """The ArtifactStore of the run's workspace."""
