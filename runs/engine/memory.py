"""What an entity remembers (seed 000 §3.6.2): the scope, the read window and the retention
policy, worked out once here; the stores only keep and return items.

The retention policy applies in this order when a run remembers its item: items past their
`ttl_seconds` are gone first (they are neither read, counted nor folded); then, past
`summarization_threshold` N items, the oldest are folded into one summary item by a model call
(runs/engine/summaries.py) so that N stay: the summary, oldest, and the N-1 newest; then only
the newest `max_items` stay (a cap under N drops the summary first: it is the oldest item)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from runs.engine.definition import Memory
from runs.engine.ports import MemoryEntries, MemoryEntry, MemoryQuery, MemoryScope, Remembered
from runs.engine.state import RunView

RECENT_N = 10  # access_pattern RECENT_N: the items a run reads
# The key of a summary item's content: {SUMMARY: text, "items": how many items it folds}.
SUMMARY = "summary_of_earlier_items"


def _config(run: RunView) -> Memory:
    return run.definition["capabilities"]["memory"]


def scope_of(run: RunView) -> MemoryScope:
    """The run's memory scope: its trace (SESSION), its entity (ENTITY) or its workspace."""
    scope = _config(run).get("scope", "SESSION")
    return MemoryScope(
        workspace_id=run.workspace_id,
        scope=scope,
        entity_id=run.entity_id if scope != "GLOBAL" else None,
        session=run.trace_id if scope == "SESSION" else None,
    )


def ending_with(run: RunView) -> MemoryScope | None:
    """What the run's end forgets: SESSION memory lives as long as its trace (the root)."""
    if run.parent_id is not None:
        return None
    return MemoryScope(workspace_id=run.workspace_id, scope="SESSION", session=run.trace_id)


def threshold(run: RunView) -> int | None:
    """`summarization_threshold`: how many items the memory holds before it folds the oldest
    into a summary (None: it never does)."""
    value = (_config(run).get("retention_policy") or {}).get("summarization_threshold")
    return value if isinstance(value, int) and value > 0 else None


def reading(run: RunView, now: datetime) -> MemoryQuery | None:
    """What the run reads (FULL or RECENT_N), or None when its entity has no memory. A
    memory that folds its oldest items reads its oldest item too: the summary."""
    config = _config(run)
    if not config.get("enabled"):
        return None
    limit = RECENT_N if config.get("access_pattern") == "RECENT_N" else None
    folds = limit is not None and threshold(run) is not None
    return MemoryQuery(scope_of(run), now, limit, with_oldest=folds)


def oldest_first(items: list[Any], query: MemoryQuery | None = None) -> list[Any]:
    """The store answers newest first; the model reads the oldest first. The oldest item
    a `with_oldest` query brought past its limit stays only when it is a summary."""
    beyond = query is not None and query.limit is not None and len(items) > query.limit
    if beyond and not is_summary(items[-1]):
        items = items[:-1]
    return list(reversed(items))


def is_summary(item: Any) -> bool:
    """Whether a memory item is the summary of earlier items a fold left."""
    return isinstance(item, dict) and isinstance(item.get(SUMMARY), str)


def shown(items: list[Any]) -> str:
    """The memory as a prompt shows it (oldest first): the summary of earlier items, then
    the others as JSON."""
    lines = [f"Summary of earlier items: {item[SUMMARY]}" for item in items if is_summary(item)]
    rest = [item for item in items if not is_summary(item)]
    if rest:
        lines.append(_json(rest))
    return "\n".join(lines)


def remembering(run: RunView, content: Any, now: datetime) -> Remembered | None:
    """One item to keep under the retention policy (max_items, ttl_seconds), or None when
    the entity has no memory. A memory that folds its items applies max_items after the
    fold (summaries.remember), not as it writes the item."""
    config = _config(run)
    if not config.get("enabled"):
        return None
    retention = config.get("retention_policy") or {}
    ttl = retention.get("ttl_seconds")
    return Remembered(
        scope=scope_of(run),
        content=content,
        expires_at=now + timedelta(seconds=ttl) if ttl else None,
        keep=None if threshold(run) is not None else max_items(run),
    )


def max_items(run: RunView) -> int | None:
    """`max_items`: how many items the memory keeps at most (None: no cap)."""
    return (_config(run).get("retention_policy") or {}).get("max_items") or None


def foldable(run: RunView, now: datetime) -> MemoryEntries | None:
    """The items a fold may take: those past the newest N-1 (N the threshold)."""
    limit = threshold(run)
    if limit is None or not _config(run).get("enabled"):
        return None
    return MemoryEntries(scope_of(run), now, skip=limit - 1)


def to_fold(entries: list[MemoryEntry]) -> list[MemoryEntry]:
    """The items to fold, oldest first: the memory holds more than its threshold when two
    or more are past the newest N-1 (a lone one past them is the summary itself)."""
    return list(reversed(entries)) if len(entries) >= 2 else []


def folded(text: str, entries: list[MemoryEntry]) -> dict[str, Any]:
    """The content of the summary item that replaces `entries`."""
    count = 0
    for entry in entries:
        items = entry.content.get("items") if is_summary(entry.content) else None
        count += items if isinstance(items, int) and items > 0 else 1
    return {SUMMARY: text, "items": count}


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
