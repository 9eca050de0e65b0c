"""Websocket routes. The live trace consumer joins here when the runs app provides it."""

from __future__ import annotations

from django.urls import path

from approvals.consumers import InboxConsumer

websocket_urlpatterns: list = [
    path("ws/approvals/", InboxConsumer.as_asgi()),
]
