"""A finished trace written straight to the database (the trace page's tests read it; the
engine's own runs are the browser tests'), and how to read a rendered tree's nodes."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from runs.models import Run, RunStatus, TraceSequence
from runs.store import latest_version


def build_trace(kinds: dict, agents: int, skills: int, actions: int) -> dict[str, list[Run]]:
    """A finished trace of `1 + agents + agents*skills + agents*skills*actions` runs, written
    in one insert (the engine's own runs are the browser test's)."""
    versions = {kind: latest_version(entity) for kind, entity in kinds.items()}
    now = timezone.now()
    root_id = uuid.uuid4()
    made: dict[str, list[Run]] = {kind: [] for kind in kinds}

    def run(kind: str, parent: Run | None, index: int) -> Run:
        entity = kinds[kind]
        row = Run(
            id=root_id if parent is None else uuid.uuid4(),
            workspace_id=entity.workspace_id,
            entity=entity,
            entity_version=versions[kind],
            parent=parent,
            root_id=None if parent is None else root_id,
            trace_id=root_id,
            depth=0 if parent is None else parent.depth + 1,
            lineage=[] if parent is None else [*parent.lineage, str(parent.pk)],
            status=RunStatus.COMPLETED,
            group_index=index,
            started_at=now,
            completed_at=now,
            execution_time_ms=1234,
            total_tokens=100,
            total_cost_usd=Decimal("0.0015"),
        )
        made[kind].append(row)
        return row

    root = run("PROCESS", None, 0)
    for a in range(agents):
        agent = run("AGENT", root, a)
        for s in range(skills):
            skill = run("SKILL", agent, s)
            for n in range(actions):
                run("ACTION", skill, n)
    Run.objects.bulk_create([row for rows in made.values() for row in rows])
    TraceSequence.objects.create(trace_id=root_id, last_seq=7)
    return made


def nodes_in(html: str) -> list[str]:
    return re.findall(r'<li id="node-([0-9a-f-]{36})"', html)


def place(run: Run, origin: datetime, start_s: float, seconds: float | None, **fields) -> None:
    """Set when a run started (`start_s` after `origin`) and how long it ran (`seconds`;
    None: still going, no completion), as the timeline reads them."""
    started = origin + timedelta(seconds=start_s)
    done = None if seconds is None else started + timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(
        started_at=started,
        completed_at=done,
        execution_time_ms=None if seconds is None else round(seconds * 1000),
        **fields,
    )


def timeline_rows(html: str) -> list[str]:
    """The run ids of a rendered timeline's rows, in order."""
    return re.findall(r'<li id="tl-([0-9a-f-]{36})"', html)


def bar_of(html: str, run_id: object) -> tuple[float, float] | None:
    """A timeline row's bar: (left, width) in percent, None when it has no bar."""
    row = html[html.index(f'<li id="tl-{run_id}"') :]
    row = row[: row.index("</li>")]
    found = re.search(r'class="tl-bar" style="left:([\d.]+)%;width:([\d.]+)%"', row)
    return (float(found[1]), float(found[2])) if found else None
