"""The account pages: the user's API tokens, making one, revoking one; and the answer to a
client locked out after too many failed sign-ins.

Only the user's own tokens are listed or revoked (anyone else's is a 404). A new token's
plaintext is in the one answer to the form that made it, never in a page fetched later, and
the pages are not cached: the answer that holds it must not be kept anywhere.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from config.api_contract import error_body
from governance.forms import TokenCreateForm
from governance.lockout import LOCKED_OUT, lockout_message, retry_after
from governance.models import ApiToken
from governance.tokens import api_token_create, api_token_get, api_token_revoke, api_tokens_of

PAGE = "governance/tokens.html"


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _context(
    request: HttpRequest,
    *,
    form: TokenCreateForm | None = None,
    created: ApiToken | None = None,
    plaintext: str = "",
) -> dict[str, Any]:
    return {
        "tokens": list(api_tokens_of(request.user)),
        "form": form or TokenCreateForm(),
        "created": created,
        "plaintext": plaintext,
        "api_base": request.build_absolute_uri("/api/v1/"),
    }


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def tokens(request: HtmxHttpRequest) -> HttpResponse:
    """The list and the form; a valid POST makes a token and shows it this once (with htmx:
    the form's box and the list; without: the whole page). A refused form answers 422 with
    the errors at their fields."""
    if request.method == "GET":
        return render(request, PAGE, _context(request))
    form = TokenCreateForm(request.POST)
    if not form.is_valid():
        template = f"{PAGE}#token-create" if request.htmx else PAGE
        return render(request, template, _context(request, form=form), status=422)
    token, plaintext = api_token_create(
        user=request.user, name=form.cleaned_data["name"], expires_at=form.expires_at()
    )
    context = _context(request, created=token, plaintext=plaintext)
    if not request.htmx:
        return render(request, PAGE, context)
    created_box = render_to_string(f"{PAGE}#token-create", context, request=request)
    rows = render_to_string(f"{PAGE}#token-rows", {**context, "oob": True}, request=request)
    return HttpResponse(created_box + rows)


@login_required
@never_cache
@require_POST
def token_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Revoke one of the user's tokens: the list again for htmx, else back to the page."""
    token = api_token_get(request.user, pk)
    api_token_revoke(token=token, user=request.user)
    if not request.htmx:
        return redirect("account:tokens")
    return render(request, f"{PAGE}#token-rows", _context(request))


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: what a locked-out client gets, 429 with Retry-After."""
    wait = retry_after(request)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            error_body(LOCKED_OUT, lockout_message(request)), status=429
        )
    else:
        context = {
            "minutes": max(1, math.ceil(wait / 60)),
            "failure_limit": settings.AXES_FAILURE_LIMIT,
        }
        response = render(request, "governance/locked_out.html", context, status=429)
    if wait:
        response["Retry-After"] = str(wait)
    return response
