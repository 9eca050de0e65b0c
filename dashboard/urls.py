from __future__ import annotations

app_name = "dashboard"

urlpatterns: list = []
