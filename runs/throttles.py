"""The per-workspace throttle of run starts (execute and re-run): whoever starts them, a
workspace starts at most HIERARCH_API["WORKSPACE_RATE"] runs, so one noisy client cannot take
a shared workspace's capacity. It stacks on the per-user throttle."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class WorkspaceRateThrottle(SimpleRateThrottle):
    """Counts the requests of a view by the workspace it starts runs in: the view's
    `throttle_workspace(request)` answers the workspace's id (None: not throttled here, e.g.
    an object the user cannot see, which answers 404 anyway)."""

    scope = "workspace"

    def get_rate(self) -> str:
        return settings.HIERARCH_API["WORKSPACE_RATE"]

    def allow_request(self, request: Any, view: Any) -> bool:
        # Read at each request, so a changed setting applies at once (and in tests).
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        workspace_id = view.throttle_workspace(request)
        if workspace_id is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": workspace_id}
