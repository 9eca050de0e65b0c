"""The API's one parser: every request body is read here, once, and checked before any view.

Apart from `config/api_contract.py` because DRF imports the parser classes named in its
settings while it builds `APIView`, and that module imports `rest_framework.views`: a parser
there would be imported by its own import (a circle). This module imports no view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status

from config.json_input import JSONInputRefused, json_input_loads


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the request body is too large"
    default_code = "payload_too_large"


def size_text(count: int) -> str:
    """As `entities.exchange.size_text` (not imported: this module loads before the apps)."""
    megabytes, rest = divmod(count, 1024 * 1024)
    return f"{megabytes} MB" if megabytes and not rest else f"{count:,} bytes"


def body_limit() -> int:
    """The largest body the API reads: HIERARCH_IMPORT_MAX_BYTES, or Django's own limit
    (DATA_UPLOAD_MAX_MEMORY_SIZE) when that is lower."""
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    limit = settings.HIERARCH_IMPORT_MAX_BYTES
    return min(limit, django_limit) if django_limit is not None else limit


def body_too_large(length: int | None = None) -> PayloadTooLarge:
    limit = body_limit()
    size = f"is {size_text(length)}" if length is not None else "is over the limit"
    return PayloadTooLarge(f"the request body {size}; the API takes up to {size_text(limit)}")


def refuse_large_body(meta: Mapping[str, Any]) -> None:
    """A body whose Content-Length is over HIERARCH_IMPORT_MAX_BYTES, refused before it is
    read."""
    raw = meta.get("CONTENT_LENGTH") or "0"
    length = int(raw) if raw.isascii() and raw.isdecimal() else 0
    if length > body_limit():
        raise body_too_large(length)


class JSONBodyParser(parsers.JSONParser):
    """REST_FRAMEWORK's one parser: every request body of the API is read here, once, and
    refused before any view sees it when it is over HIERARCH_IMPORT_MAX_BYTES (413, counted
    as read: a body without Content-Length too), not UTF-8 or not JSON (400 MALFORMED_JSON),
    or JSON the product does not take (400 VALIDATION_ERROR naming where: nested deeper than
    HIERARCH_JSON_MAX_DEPTH, NUL or lone surrogates in a string or key, an infinite number;
    see config/json_input.py)."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        request = (parser_context or {}).get("request")
        if request is not None:
            refuse_large_body(request.META)
        limit = body_limit()
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise body_too_large()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"JSON parse error - not UTF-8: {exc}") from None
        try:
            return json_input_loads(text)
        except JSONInputRefused as refused:
            raise exceptions.ValidationError(refused.problems) from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
