"""Websocket routes: the inbox's, and each trace's live events."""

from __future__ import annotations

from django.urls import path

from approvals.consumers import InboxConsumer
from runs.consumers import TraceConsumer

websocket_urlpatterns: list = [
    path("ws/approvals/", InboxConsumer.as_asgi()),
    path("ws/runs/<uuid:trace_id>/", TraceConsumer.as_asgi()),
]
