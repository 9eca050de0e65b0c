from __future__ import annotations

from django.urls import path

from approvals import views

app_name = "approvals"

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("results/", views.inbox_results, name="inbox_results"),
    path("decide/", views.inbox_decide, name="inbox_decide"),
    path("<int:pk>/", views.approval_detail, name="detail"),
    path("<int:pk>/decision/", views.approval_decision, name="decision"),
]
