"""The inbox badge: how many requests wait for the signed-in user, on every page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from approvals.selectors import approvals_open_for


def inbox(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    def count() -> int:
        return approvals_open_for(user).count()

    # Lazy: a page that never shows the badge never counts.
    return {"inbox_count": count}
