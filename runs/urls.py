from __future__ import annotations

from runs.views import listing, trace

app_name = "runs"

urlpatterns = [*listing.urlpatterns, *trace.urlpatterns]
