"""What every built-in adapter is: a default definition, `run` and `sandbox`.

An adapter validates its own arguments (the runner has already checked them against the
tool's declared schema, which a workspace may narrow), does its work and raises `ToolError`:
`permanent=True` when trying again cannot help.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from jsonschema.exceptions import SchemaError

from entities.definition import humanize
from runs.engine import pinned, schemas
from runs.engine.ports import VALIDATION_ERROR, ToolError

if TYPE_CHECKING:
    from tools.credentials import Credentials


@dataclass(frozen=True)
class ToolContext:
    """Who calls, and for which run. `tool` is the registry definition (tool.json).

    `credentials` are the tool's resolved authentication (`tools/credentials.py`), given only
    to an adapter that sends them (`SENDS_CREDENTIALS`) and never to a sandbox; their values
    show in no repr."""

    tool: dict[str, Any]
    idempotency_key: str
    workspace_id: int
    run_id: str
    credentials: Credentials | None = field(default=None, repr=False, compare=False)
    # The W3C traceparent of the run's step, for an adapter that calls out; "" for none
    # (the entity's trace_id_propagation is false: runs/engine/observability.py).
    traceparent: str = ""

    @property
    def tool_id(self) -> str:
        return str(self.tool.get("tool_id", ""))


@dataclass(frozen=True)
class Replayed:
    """An adapter's answer to a key it had already executed: the recorded output."""

    output: Any


Adapter = Callable[[dict[str, Any], ToolContext], Any]


@dataclass(frozen=True)
class Builtin:
    name: str
    definition: dict[str, Any]
    run: Adapter
    sandbox: Adapter
    # Whether `run` sends the tool's authentication anywhere (http_request does); the runner
    # resolves a secret only for an adapter that uses it.
    sends_credentials: bool = False
    # Whether `run` waits on the network (http_request does): the runner lets go of the
    # thread's database connection before it (`before_waiting`).
    waits_on_network: bool = False

    @property
    def parameters(self) -> dict[str, Any]:
        return self.definition["function_schema"]["parameters"]


def validator_for(schema: dict[str, Any]) -> Any:
    """A compiled validator for `schema`, shared by every call with the same schema.

    Raises SchemaError when `schema` is not a valid JSON Schema.
    """
    # A tool's schema is a part of a pinned definition or an adapter's constant, never
    # changed in place: the same object finds its validator without being serialized again.
    return pinned.derived(schema, "tool validator", lambda: _validator(_Frozen(schema)))


def check_arguments(schema: dict[str, Any], arguments: Any, *, tool_id: str) -> None:
    """Raise a permanent VALIDATION_ERROR naming every argument that breaks `schema`."""
    try:
        validator = validator_for(schema)
    except SchemaError as exc:
        raise ToolError(
            f"tool {tool_id}: function_schema.parameters is not a valid JSON Schema: {exc.message}",
            permanent=True,
            code=VALIDATION_ERROR,
        ) from None
    quick = schemas.quick_check(schema)
    if quick is not None and quick(arguments):
        return  # valid for sure; jsonschema only for what may break it, and its messages
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.path)))
    if errors:
        problems = [str(p) for error in errors for p in humanize(error, ("arguments",))]
        raise ToolError(
            f"tool {tool_id}: invalid arguments: {'; '.join(problems)}",
            permanent=True,
            code=VALIDATION_ERROR,
        )


class _Frozen:
    """A schema as a cache key: the same dict content finds the same compiled validator."""

    __slots__ = ("schema", "key")

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        self.key = json.dumps(schema, sort_keys=True, default=str)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and other.key == self.key


@lru_cache(maxsize=512)
def _validator(frozen: _Frozen) -> Any:
    schemas.check_schema(frozen.schema)
    return schemas.user_validator(frozen.schema)
