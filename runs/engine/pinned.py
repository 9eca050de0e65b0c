"""What the engine derives from a pinned definition, worked out once per definition.

A run's definition is its entity version's snapshot: it never changes, and both stores hand
out one shared object per version (`runs/store.py`'s process-wide cache, the in-memory
store's entities). So a value derived from a part of it (a compiled JSON Schema validator, the
system prompt) is worked out once per part and reused by every run of that version, not once
per node.

Entries are keyed by the part's identity and hold the part itself, so its id cannot be
reused by another object while the entry lives. A definition made on the fly (a person's
locked constraints give the run a changed copy) gets entries of its own; the oldest entries
go when there are more than MAX_ENTRIES.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

MAX_ENTRIES = 4096

_DERIVED: OrderedDict[tuple[int, str], tuple[object, Any]] = OrderedDict()
_LOCK = threading.Lock()


def derived(part: object, kind: str, make: Callable[[], T]) -> T:
    """`make()` for this `part` of a pinned definition (never changed in place), worked out
    once per part object and `kind` of value."""
    key = (id(part), kind)
    found = _DERIVED.get(key)
    if found is not None and found[0] is part:
        return found[1]  # type: ignore[no-any-return]
    value = make()
    with _LOCK:
        _DERIVED[key] = (part, value)
        while len(_DERIVED) > MAX_ENTRIES:
            _DERIVED.popitem(last=False)
    return value


# Parts equal across pinned definitions, one object each (see `shared`), by their JSON text.
# Emptied whole when it passes SHARED_KEPT: definitions shared before keep their parts; later
# ones share anew.
SHARED_KEPT = 20_000
SHARED_DEPTH = 2  # a definition's sections and their parts: most of the saving, little work
_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()
_text = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":")).encode


def shared(definition: T) -> T:
    """`definition` (JSON, never changed in place) with each of its sections, and each part
    of a section, equal to one seen before replaced by that one object.

    A worker keeps the definition of every entity its runs touch, and most of a definition
    (governance, planning, observability, the defaults) is the same from one entity to the
    next: shared, an entity's definition takes about a fifth of the memory (5 KB instead of
    25), and a value derived from a shared part (`derived`) is worked out once for all."""
    if type(definition) is not dict or not isinstance(definition, dict):
        return definition
    with _SHARED_LOCK:
        if len(_SHARED) > SHARED_KEPT:
            _SHARED.clear()
        return cast(T, {key: _share(part, SHARED_DEPTH) for key, part in definition.items()})


def _share(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is dict:
        if depth > 1:
            value = {key: _share(part, depth - 1) for key, part in value.items()}
    elif kind is list:
        if depth > 1:
            value = [_share(part, depth - 1) for part in value]
    else:
        return value
    try:
        text = _text(value)
    except (TypeError, ValueError):  # not JSON (a definition built in code): kept as it is
        return value
    return _SHARED.setdefault(text, value)
