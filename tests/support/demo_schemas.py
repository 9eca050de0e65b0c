"""Every JSON Schema of the demo hierarchy (entities/fixtures/video_ad_process.json): each
entity's input and output schema and each tool's parameters, and `standard`, which rewrites
the seed's `"required": true` inside a property as JSON Schema wants it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[2] / "entities" / "fixtures" / "video_ad_process.json"


def standard(schema: Any) -> Any:
    """The seed writes `"required": true` inside a property; JSON Schema wants a list above."""
    if isinstance(schema, list):
        return [standard(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: standard(v) for k, v in schema.items() if not (k == "required" and v in (True, False))
    }
    properties = schema.get("properties")
    if isinstance(properties, dict):
        marked = [
            k for k, v in properties.items() if isinstance(v, dict) and v.get("required") is True
        ]
        if marked:
            out["required"] = list(dict.fromkeys([*schema.get("required", []), *marked]))
    return out


def fixture_schemas() -> list[tuple[str, dict]]:
    entities = json.loads(FIXTURE.read_text())["entities"]
    found = []
    for entity in entities:
        name = entity["identity"]["name"]
        io = entity.get("io_contract") or {}
        for side in ("input", "output"):
            schema = (io.get(side) or {}).get("schema")
            if schema:
                found.append((f"{name}.{side}", schema))
        for tool in (entity.get("capabilities") or {}).get("tools", []):
            found.append((f"{name}.tool.{tool['tool_id']}", tool["function_schema"]["parameters"]))
    return found


FIXTURE_SCHEMAS = fixture_schemas()
