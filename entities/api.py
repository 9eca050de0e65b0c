"""API endpoints (issue 6); this app's routes are `urlpatterns`, gathered in config/api.py."""

from __future__ import annotations

urlpatterns: list = []
