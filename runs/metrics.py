"""An entity's metrics settings (`observability.metrics`), read where a run's figures are
recorded and shown.

`custom_metrics`: when a run ends, each metric's number is read from the run's output at the
metric's name (a key of the output, or a dotted path into nested objects: `quality.score`)
and kept as a `RunMetric` row. Anything but a finite number there (a string, a bool, null, NaN,
an infinity, a number beyond `LARGEST`, a missing key) records nothing for that metric.

`track_latency`, `track_token_usage`, `track_cost`: a run's time, tokens and cost are always
counted on the run (budgets, limits and alerts need them); a flag turned off leaves that
figure out of the dashboard's numbers for the entity's own rows (see dashboard.cards).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

MAX_CUSTOM_METRICS = 20  # per entity: the schema's maxItems says the same
LARGEST = 1e15  # a metric's number beyond this is a mistake, not a measure
TRACKED = ("track_latency", "track_token_usage", "track_cost")


def metrics_settings(definition: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The `observability.metrics` section of a definition, or an empty one."""
    observability = (definition or {}).get("observability") or {}
    metrics = observability.get("metrics") if isinstance(observability, Mapping) else None
    return metrics if isinstance(metrics, Mapping) else {}


def tracked(definition: Mapping[str, Any] | None) -> dict[str, bool]:
    """Which of the run figures the entity tracks (each on unless turned off)."""
    settings = metrics_settings(definition)
    return {flag: settings.get(flag) is not False for flag in TRACKED}


def metric_number(output: Any, name: str) -> float | None:
    """The finite number the output holds at `name` (a key, else a dotted path), or None."""
    if not isinstance(output, Mapping):
        return None
    value = output.get(name, _MISSING)
    if value is _MISSING and "." in name:
        value = output
        for part in name.split("."):
            if not isinstance(value, Mapping):
                return None
            value = value.get(part, _MISSING)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if math.isnan(number) or abs(number) > LARGEST:
        return None
    return number


def custom_metric_rows(
    *,
    definition: Mapping[str, Any] | None,
    output: Any,
    run_id: Any,
    workspace_id: Any,
    entity_id: Any,
    now: datetime,
) -> list[dict[str, Any]]:
    """The `RunMetric` rows of a run that ended with `output`: one per custom metric whose
    number the output holds (none when the entity declares no custom metric)."""
    declared = metrics_settings(definition).get("custom_metrics")
    if not isinstance(declared, list | tuple):  # never fail a run's end over its settings
        declared = ()
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for metric in list(declared)[:MAX_CUSTOM_METRICS]:
        name = metric.get("metric_name") if isinstance(metric, Mapping) else None
        if not isinstance(name, str) or not name or name[:100] in seen:
            continue  # a name twice (a definition saved before the rule) would fail the row
        seen.add(name[:100])
        number = metric_number(output, name)
        if number is not None:
            rows.append(
                {
                    "run": run_id,
                    "workspace": workspace_id,
                    "entity": entity_id,
                    "name": name[:100],
                    "value": number,
                    "recorded_at": now,
                }
            )
    return rows


_MISSING = object()
