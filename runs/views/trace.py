"""Console pages (issue 6); this module's routes are `urlpatterns`, gathered in runs/urls.py."""

from __future__ import annotations

urlpatterns: list = []
