"""Websocket routes. The live trace consumer joins here when the runs app provides it."""

from __future__ import annotations

websocket_urlpatterns: list = []
