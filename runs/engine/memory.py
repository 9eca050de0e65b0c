"""What an entity remembers (seed 000 §3.6.2): the scope, the read window and the retention
policy, worked out once here; the stores only keep and return items."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from runs.engine.definition import Memory
from runs.engine.ports import MemoryQuery, MemoryScope, Remembered
from runs.engine.state import RunView

RECENT_N = 10  # access_pattern RECENT_N: the items a run reads


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


def reading(run: RunView, now: datetime) -> MemoryQuery | None:
    """What the run reads (FULL or RECENT_N), or None when its entity has no memory."""
    config = _config(run)
    if not config.get("enabled"):
        return None
    limit = RECENT_N if config.get("access_pattern") == "RECENT_N" else None
    return MemoryQuery(scope_of(run), now, limit)


def oldest_first(items: list[Any]) -> list[Any]:
    """The store answers newest first; the model reads the oldest first."""
    return list(reversed(items))


def remembering(run: RunView, content: Any, now: datetime) -> Remembered | None:
    """One item to keep under the retention policy (max_items, ttl_seconds), or None when
    the entity has no memory."""
    config = _config(run)
    if not config.get("enabled"):
        return None
    retention = config.get("retention_policy") or {}
    ttl = retention.get("ttl_seconds")
    return Remembered(
        scope=scope_of(run),
        content=content,
        expires_at=now + timedelta(seconds=ttl) if ttl else None,
        keep=retention.get("max_items") or None,
    )
