"""ASGI middleware of the console."""

from __future__ import annotations

import asyncio
from typing import Any

from runs.events import remember_server_loop


class RememberLoop:
    """Records the server's event loop for the engine's threads (`runs/events.py`): with the
    in-memory channel layer of the embedded default, a live page hears only messages put on
    the loop its consumer runs on."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        remember_server_loop(asyncio.get_running_loop())
        return await self.app(scope, receive, send)
