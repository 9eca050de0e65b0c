"""What every endpoint under /api/v1/ keeps: seed 001's error object, request bodies that
refuse fields they do not know, page-number pagination.

Every error answers `{"error": {"code", "message", "details"}, "retryable": bool}` (plus
`backoffSec` when waiting helps): DRF's own exceptions, Django's `Http404` from a selector and
the services' refusals alike, so a client reads one shape whatever went wrong.

This module is apart from `config/api.py` (the urlconf) because DRF imports the classes that
REST_FRAMEWORK names while it defines its generic views: the module they live in must not
import any view, or the imports go round in a circle.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from django.utils.module_loading import import_string
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.serializers import PolymorphicProxySerializerExtension
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, pagination, serializers, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from config.parsers import body_too_large

log = logging.getLogger(__name__)

# The services' refusals: exceptions with `code` (UPPER_SNAKE), a message, and optionally
# `details` ({field: problem}) and `status`. Named, not imported, so this module loads before
# the apps are ready.
SERVICE_REFUSALS = (
    "approvals.services.DecisionRefused",
    "runs.services.RunRefused",
)
# A refusal's status follows its code; a code not here keeps the exception's own `status`
# (400 when it has none).
REFUSAL_STATUS = {
    "PERMISSION_DENIED": status.HTTP_403_FORBIDDEN,
    "NOT_FOUND": status.HTTP_404_NOT_FOUND,
    "ALREADY_DECIDED": status.HTTP_409_CONFLICT,
    "CONFLICT": status.HTTP_409_CONFLICT,
    "IDEMPOTENCY_CONFLICT": status.HTTP_409_CONFLICT,
    "VALIDATION_ERROR": status.HTTP_400_BAD_REQUEST,
    # A quota or lifetime budget used up: waiting a little does not help (retryable false),
    # a person has to raise the limit, so it is refused like a permission, not throttled.
    "LIMIT_EXCEEDED": status.HTTP_403_FORBIDDEN,
}

# DRF's exceptions by the code a client sees (most specific first).
CODES: tuple[tuple[type[exceptions.APIException], str], ...] = (
    (exceptions.ParseError, "MALFORMED_JSON"),
    (exceptions.ValidationError, "VALIDATION_ERROR"),
    (exceptions.NotAuthenticated, "NOT_AUTHENTICATED"),
    (exceptions.AuthenticationFailed, "AUTHENTICATION_FAILED"),
    (exceptions.PermissionDenied, "PERMISSION_DENIED"),
    (exceptions.NotFound, "NOT_FOUND"),
    (exceptions.MethodNotAllowed, "METHOD_NOT_ALLOWED"),
    (exceptions.NotAcceptable, "NOT_ACCEPTABLE"),
    (exceptions.UnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE"),
    (exceptions.Throttled, "RATE_LIMITED"),
)


# Session authentication alone offers no challenge, so DRF would answer an anonymous request
# 403; the API answers 401 with this. A token class put first in the authentication list
# (issue 6) brings its own challenge, which is kept.
SESSION_CHALLENGE = 'Session realm="api"'


def error_body(
    code: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    *,
    retryable: bool = False,
    backoff_sec: int | None = None,
) -> dict[str, Any]:
    """Seed 001's error object."""
    body: dict[str, Any] = {
        "error": {"code": code, "message": message, "details": dict(details or {})},
        "retryable": retryable,
    }
    if backoff_sec is not None:
        body["backoffSec"] = backoff_sec
    return body


def field_errors(detail: Any, prefix: str = "") -> dict[str, str]:
    """DRF's nested validation errors as {"field.sub.0": "message"}, the shape the services
    use for `details`; messages of one field joined."""
    if isinstance(detail, Mapping):
        found: dict[str, str] = {}
        for key, value in detail.items():
            found.update(field_errors(value, f"{prefix}.{key}" if prefix else str(key)))
        return found
    where = prefix or api_settings.NON_FIELD_ERRORS_KEY
    if isinstance(detail, list | tuple):
        if all(not isinstance(item, Mapping | list | tuple) for item in detail):
            return {where: " ".join(str(item) for item in detail)}
        found = {}
        for index, item in enumerate(detail):
            if item:  # a list serializer reports {} for the items without a problem
                found.update(field_errors(item, f"{prefix}.{index}" if prefix else str(index)))
        return found
    return {where: str(detail)}


@cache
def _refusal_classes() -> tuple[type[Exception], ...]:
    return tuple(import_string(name) for name in SERVICE_REFUSALS)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """REST_FRAMEWORK's EXCEPTION_HANDLER: every error as seed 001's error object."""
    if isinstance(exc, _refusal_classes()):
        code = exc.code  # type: ignore[attr-defined]
        answer = REFUSAL_STATUS.get(code, getattr(exc, "status", status.HTTP_400_BAD_REQUEST))
        details = getattr(exc, "details", None) or {}
        set_rollback()
        return Response(error_body(code, str(exc), details), status=answer)

    if isinstance(exc, RequestDataTooBig):
        exc = body_too_large()  # Django's own limit, DATA_UPLOAD_MAX_MEMORY_SIZE
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, context)  # sets Allow, Retry-After, WWW-Authenticate
    if response is None or not isinstance(exc, exceptions.APIException):
        if settings.DEBUG:
            return None  # Django's debug page, with the traceback
        log.error("unhandled error in the API", exc_info=exc)
        set_rollback()
        return Response(
            error_body("INTERNAL_ERROR", "something went wrong on our side; it was logged"),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    code = next((c for kind, c in CODES if isinstance(exc, kind)), exc.default_code.upper())
    message, details = str(exc.detail), {}
    retryable, backoff = False, None
    if isinstance(exc, exceptions.ValidationError):
        details = field_errors(exc.detail)
        message = "the request is not valid: " + "; ".join(
            f"{where}: {problem}" for where, problem in details.items()
        )
    elif isinstance(exc.detail, Mapping):
        # A 404 or 409 about a field of the body or query (`Conflict({"status": …})`).
        details = field_errors(exc.detail)
        message = "; ".join(f"{where}: {problem}" for where, problem in details.items())
    elif isinstance(exc, exceptions.Throttled):
        backoff = max(1, math.ceil(exc.wait or 1))
        retryable = True
        message = f"too many requests; try again in {backoff} s"
        response["Retry-After"] = str(backoff)
    elif isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        if "WWW-Authenticate" not in response:
            response["WWW-Authenticate"] = SESSION_CHALLENGE
    elif isinstance(exc, exceptions.PermissionDenied) and message.startswith("CSRF Failed"):
        code = "CSRF_FAILED"
    response.data = error_body(code, message, details, retryable=retryable, backoff_sec=backoff)
    return response


class Conflict(exceptions.APIException):
    """409 CONFLICT: a request the schema calls valid that the object's current state
    refuses (an entity moved to the status it has). A 400 is for what is wrong in the request
    itself; this is for what is wrong with doing it now."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "the request conflicts with the object's current state"
    default_code = "conflict"


class PageNumberPagination(pagination.PageNumberPagination):
    """`?page=N&page_size=M`; a page number or size that is not a whole number of 1 or more is
    refused (400), a page past the last is not found (404), a size above the maximum is
    capped. The schema says the same (`minimum: 1`); every list documents the 404."""

    page_size = settings.HIERARCH_API["PAGE_SIZE"]
    page_size_query_param = "page_size"
    max_page_size = settings.HIERARCH_API["MAX_PAGE_SIZE"]
    invalid_page_message = "page {page_number} does not exist: {message}"

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        problems = {
            name: "a whole number, 1 or more"
            for name in (self.page_query_param, self.page_size_query_param)
            if name in request.query_params
            and not (request.query_params[name].isdecimal() and int(request.query_params[name]))
        }
        if problems:
            raise exceptions.ValidationError(problems)
        return super().paginate_queryset(queryset, request, view)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = (
                    f"How many per page: {self.page_size} unless given; "
                    f"more than {self.max_page_size} gives {self.max_page_size}."
                )
            else:
                parameter["description"] = "A page number; one past the last page is a 404."
        return parameters


class StrictSerializer(serializers.Serializer):
    """A request body (or query string) that refuses fields it does not know, naming them,
    along with whatever else is wrong: a misspelt field must not be silently dropped."""

    # Query parameters that are not this serializer's business (pagination).
    passed_over: frozenset[str] = frozenset()

    def to_internal_value(self, data: Any) -> Any:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            known = {name for name, field in self.fields.items() if not field.read_only}
            takes = ", ".join(sorted(known))
            unknown = {
                str(name): [f"unknown field; this takes {takes}"]
                for name in sorted(set(data) - known - self.passed_over, key=str)
            }
        try:
            value = super().to_internal_value(data)
        except exceptions.ValidationError as invalid:
            if unknown and isinstance(invalid.detail, dict):
                raise exceptions.ValidationError({**unknown, **invalid.detail}) from None
            raise
        if unknown:
            raise exceptions.ValidationError(unknown)
        return value


class StrictSerializerScheme(OpenApiSerializerExtension):
    """A strict body's schema says what the API does with a field it does not know: refuse it
    (`additionalProperties: false`), so no client or generator takes an extra field for
    valid."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        # drf-spectacular's documented way for an extension to start from the usual mapping.
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        return schema


class PolymorphicBodyScheme(PolymorphicProxySerializerExtension):
    """A body of one of several shapes (`PolymorphicProxySerializer`, oneOf by a field such as
    `decision`) cannot be left out: its schema requires the field that picks the shape, so
    the request body is required too. drf-spectacular's own mapping otherwise."""

    priority = 0  # before drf-spectacular's (-1), which it extends

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = super().map_serializer(auto_schema, direction)
        field = self.target.resource_type_field_name
        if field:
            schema["required"] = [field]
        return schema


# The error object, for the OpenAPI schema.


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="UPPER_SNAKE: VALIDATION_ERROR, MALFORMED_JSON, NOT_AUTHENTICATED, "
        "PERMISSION_DENIED, LIMIT_EXCEEDED, CSRF_FAILED, NOT_FOUND, METHOD_NOT_ALLOWED, "
        "NOT_ACCEPTABLE, UNSUPPORTED_MEDIA_TYPE, ALREADY_DECIDED, CONFLICT, "
        "IDEMPOTENCY_CONFLICT, RATE_LIMITED, INTERNAL_ERROR"
    )
    message = serializers.CharField(help_text="What went wrong, for a person.")
    details = serializers.DictField(
        # Null where there is nothing to say: a request that timed out has no responded_by.
        child=serializers.CharField(allow_null=True),
        help_text='What is wrong with each field, by its path ("payload.subject"); '
        "for ALREADY_DECIDED: status, decision, responded_by, responded_at (null when "
        "nobody decided).",
    )


class ErrorSerializer(serializers.Serializer):
    """Seed 001's error object."""

    error = ErrorBodySerializer()
    retryable = serializers.BooleanField(
        help_text="Whether the same request may succeed later (true for RATE_LIMITED)."
    )
    backoffSec = serializers.IntegerField(  # the seed's spelling
        required=False, help_text="Seconds to wait before retrying (RATE_LIMITED)."
    )


ERROR_WHEN = {
    400: "VALIDATION_ERROR (what is wrong with each field in `details`) or MALFORMED_JSON",
    401: "NOT_AUTHENTICATED: send `Authorization: Bearer TOKEN` (tokens at /account/tokens/) "
    "or sign in; AUTHENTICATION_FAILED: the token is unknown, revoked or expired",
    403: "PERMISSION_DENIED (the role that is needed in the message), LIMIT_EXCEEDED (a "
    "quota or cumulative budget is used up) or CSRF_FAILED",
    404: "NOT_FOUND: no such object in the workspaces you can see",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE: the API answers JSON only",
    409: "ALREADY_DECIDED: someone decided first, or the request timed out or closed; "
    "CONFLICT: the object's current state refuses it (a run that has ended, an entity "
    "that cannot move to that status); IDEMPOTENCY_CONFLICT: the Idempotency-Key was used "
    "with another request",
    415: "UNSUPPORTED_MEDIA_TYPE: send application/json",
    429: "RATE_LIMITED: retryable, wait `backoffSec` seconds; LOCKED_OUT: too many failed "
    "sign-ins or unknown tokens from this client (or for this user), wait `Retry-After` seconds",
}


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """The error answers of an operation, for `extend_schema(responses=…)`."""
    return {
        code: OpenApiResponse(ErrorSerializer, description=ERROR_WHEN[code])
        for code in (*codes, 401, 429)
    }
