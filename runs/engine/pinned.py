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

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

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
