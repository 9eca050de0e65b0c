"""The API's urlconf, under /api/v1/: each app's endpoints (its `api.py`), the OpenAPI schema,
its documentation page, and a JSON 404 for every other address.

The shared plumbing (the error object and exception handler, pagination, strict request
bodies) is in `config/api_contract.py`; DRF settings are REST_FRAMEWORK in config/settings.py.
"""

from __future__ import annotations

from django.urls import Resolver404, path, re_path, resolve, reverse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request

from approvals.api import ApprovalDecision, ApprovalDetail, ApprovalList
from entities import api as entities_api
from runs import api as runs_api
from tools import api as tools_api

app_name = "api"

ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@extend_schema(exclude=True)
@api_view(ANY_METHOD)
@permission_classes([AllowAny])
def no_endpoint(request: Request, path: str) -> None:
    """Any other address under /api/v1/: a 404 in the error object, not Django's HTML page,
    with the address that exists when only a slash was wrong."""
    message = f"no API endpoint at {request.path}"
    other = request.path[:-1] if request.path.endswith("/") else request.path + "/"
    try:
        match = resolve(other)
    except Resolver404:
        match = None
    if match is not None and match.url_name != "no-endpoint":
        message += f"; did you mean {other}?"
    raise NotFound(f"{message} (the endpoints are listed at {reverse('api:docs')})")


urlpatterns = [
    *entities_api.urlpatterns,
    *runs_api.urlpatterns,
    *tools_api.urlpatterns,
    path("approvals/", ApprovalList.as_view(), name="approval-list"),
    path("approvals/<int:pk>", ApprovalDetail.as_view(), name="approval-detail"),
    path("approvals/<int:pk>/decision", ApprovalDecision.as_view(), name="approval-decision"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    re_path(r"^(?P<path>(?s:.*))$", no_endpoint, name="no-endpoint"),
]
