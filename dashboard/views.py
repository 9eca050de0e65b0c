"""The dashboard page: the key metrics of the user's workspaces over a period, as headline
numbers and charts, and the open alerts.

The filters and everything under them are one partial (`dashboard-panel`) that serves the
page and the filters' htmx fetch; the address bar follows the filters. Filters the user may
not pick come back as field errors (422) and no numbers are shown for them.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from django_htmx.http import push_url
from django_htmx.middleware import HtmxDetails
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dashboard.cards import (
    custom_metric_rows,
    entity_cost_chart,
    entity_rows,
    headline_cards,
    metric_charts,
    status_chart,
)
from dashboard.forms import ENTITIES_OF, DashboardFilterForm
from dashboard.prometheus import HierarchCollector
from dashboard.selectors import PERIODS, dashboard_metrics


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def dashboard_context(user: Any, params: QueryDict) -> dict:
    form = DashboardFilterForm(params, user=user)
    valid = form.is_valid()
    context: dict[str, Any] = {
        "form": form,
        "valid": valid,
        "entities_of_name": ENTITIES_OF,
        "entities_of": form.entities_listed_for(),
    }
    if not valid:
        return context
    workspace, entity = form.cleaned_data["workspace"], form.cleaned_data["entity"]
    if entity is not None and workspace is None:
        workspace = entity.workspace
    period = PERIODS[form.cleaned_data["period"]]
    data = dashboard_metrics(user=user, period=period, workspace=workspace, entity=entity)
    several = workspace is None and form.fields["workspace"].queryset.count() > 1
    cards = headline_cards(data)
    charts = dict(metric_charts(data))
    return context | {
        "query": form.query(),
        "period": period,
        "workspace": workspace,
        "entity": entity,
        "data": data,
        "cards": cards,
        "metric_charts": [(card, charts[card.key]) for card in cards if card.key in charts],
        "status_chart": status_chart(data),
        "entity_chart": entity_cost_chart(data, several_workspaces=several)
        if entity is None
        else None,
        "entity_rows": entity_rows(data),
        "custom_metric_rows": custom_metric_rows(data),
        "several_workspaces": several,
        "time_zone": "UTC",  # buckets are UTC hours and days
    }


@login_required
@require_GET
def dashboard(request: HtmxHttpRequest) -> HttpResponse:
    context = dashboard_context(request.user, request.GET)
    return render(request, "dashboard/index.html", context, status=200 if context["valid"] else 422)


@login_required
@require_GET
def dashboard_panel(request: HtmxHttpRequest) -> HttpResponse:
    """The filters and the numbers alone, for the filters: the address bar shows the page."""
    context = dashboard_context(request.user, request.GET)
    response = render(
        request,
        "dashboard/index.html#dashboard-panel",
        context,
        status=200 if context["valid"] else 422,
    )
    if request.htmx and context["valid"]:
        query = context["query"]
        push_url(response, reverse("dashboard:index") + (f"?{query}" if query else ""))
    return response


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """The instance's figures in Prometheus' text format (dashboard/prometheus.py), for a
    scraper holding HIERARCH_METRICS_TOKEN as a bearer token, or a signed-in staff member or
    superuser; 403 for anyone else."""
    if not _may_scrape(request):
        return HttpResponseForbidden(
            "Send HIERARCH_METRICS_TOKEN as a bearer token, or sign in as staff.",
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HierarchCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _may_scrape(request: HttpRequest) -> bool:
    user = request.user
    if user.is_authenticated and user.is_active and (user.is_staff or user.is_superuser):
        return True
    token = settings.HIERARCH_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return secrets.compare_digest(given.strip().encode(), token.encode())
