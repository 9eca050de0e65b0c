"""The built-in tool adapters, by the name a tool's `implementation` gives.

Each module holds a default `DEFINITION` (tool.json), `run(arguments, context)` and
`sandbox(arguments, context)`, the latter a realistic answer with no external effect.
"""

from __future__ import annotations

from types import ModuleType

from tools.builtin import http_request, json_extract, record, simulated, template_render
from tools.builtin.base import Builtin, Replayed, ToolContext

__all__ = ["BUILTINS", "Builtin", "Replayed", "ToolContext"]


def _builtin(module: ModuleType) -> Builtin:
    return Builtin(
        name=module.NAME,
        definition=module.DEFINITION,
        run=module.run,
        sandbox=module.sandbox,
        sends_credentials=getattr(module, "SENDS_CREDENTIALS", False),
        waits_on_network=getattr(module, "WAITS_ON_NETWORK", False),
    )


BUILTINS: dict[str, Builtin] = {
    module.NAME: _builtin(module)
    for module in (http_request, json_extract, record, simulated, template_render)
}
