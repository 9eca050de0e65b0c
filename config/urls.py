from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from dashboard.views import prometheus_metrics

admin.site.site_header = "Hierarch"
admin.site.site_title = "Hierarch designer"
admin.site.index_title = "Design processes, agents, skills and actions"
admin.site.site_url = "/dashboard/"  # the admin's "View site": the operations console

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="dashboard:index", permanent=False)),
    path("admin/", admin.site.urls),
    # Prometheus' scrape: staff or HIERARCH_METRICS_TOKEN only (dashboard/prometheus.py)
    path("metrics", prometheus_metrics, name="metrics"),
    path("api/v1/", include("config.api")),
    path("approvals/", include("approvals.urls")),
    path("runs/", include("runs.urls")),
    path("dashboard/", include("dashboard.urls")),
    path("designer/", include("designer.urls")),
    path("account/", include("governance.urls")),
]
