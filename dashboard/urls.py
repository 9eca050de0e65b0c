from __future__ import annotations

from django.urls import path

from dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.dashboard, name="index"),
    path("panel/", views.dashboard_panel, name="panel"),
]
