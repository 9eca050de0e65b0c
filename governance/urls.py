"""The console's account pages: the user's API tokens."""

from __future__ import annotations

app_name = "account"

urlpatterns: list = []
