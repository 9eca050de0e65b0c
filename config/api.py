"""The API's urlconf, under /api/v1/: each app's endpoints (its `api.py`), the OpenAPI schema,
its documentation pages (Swagger UI and Redoc, under the product's bar: templates/drf_spectacular),
each endpoint with a trailing slash too, and a JSON 404 for every other address.

The shared plumbing (the error object and exception handler, pagination, strict request
bodies) is in `config/api_contract.py`; DRF settings are REST_FRAMEWORK in config/settings.py.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, path, re_path, resolve, reverse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)
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
    """Any other address under /api/v1/: a 404 in the error object, not Django's HTML page."""
    raise NotFound(
        f"no API endpoint at {request.path} (the endpoints are listed at {reverse('api:docs')})"
    )


@csrf_exempt  # the view it hands over to checks CSRF itself (DRF's session authentication)
def either_slash(request: HttpRequest, path: str) -> HttpResponse:
    """An address that is not an endpoint as written: the endpoint it names with or without a
    trailing slash, whatever the method, answered by the same view in the same request (a
    redirect would lose a POST's body); else `no_endpoint`'s 404.

    The API's paths have no trailing slash (`/api/v1/entities`); the slash a DRF user types by
    habit (`/api/v1/entities/`) and the old `/api/v1/approvals/` keep working. The schema lists
    the one form only."""
    other = request.path[:-1] if request.path.endswith("/") else request.path + "/"
    try:
        match = resolve(other)
    except Resolver404:
        match = None
    if match is not None and match.url_name not in {"no-endpoint", "either-slash"}:
        return match.func(request, *match.args, **match.kwargs)
    return no_endpoint(request, path=path)


urlpatterns = [
    *entities_api.urlpatterns,
    *runs_api.urlpatterns,
    *tools_api.urlpatterns,
    path("approvals", ApprovalList.as_view(), name="approval-list"),
    path("approvals/<int:pk>", ApprovalDetail.as_view(), name="approval-detail"),
    path("approvals/<int:pk>/decision", ApprovalDecision.as_view(), name="approval-decision"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    re_path(r"^(?P<path>(?s:.*))$", either_slash, name="either-slash"),
]
