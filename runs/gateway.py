"""The model gateway: every model call of the product, through litellm.

`LiteLLMGateway` implements the engine's `ModelClient` port. It maps a provider-neutral
`ModelRequest` onto `litellm.completion`, decodes the answer (JSON validated against the
requested schema, or the function the model called), measures latency, prices the call, and
turns every failure into a `ModelError` whose `code` and `retryable` the engine's retry policy
understands. The built-in offline model (`runs/offline.py`) is registered as the litellm
provider `local`, so `local/<any name>` goes through the same path as a paid model.

litellm takes seconds to import, so it is imported once, lazily, on the first call, never at
Django startup. Settings read (all optional):

    HIERARCH_OFFLINE_MODEL = {
        "PRICE_PER_1K_INPUT_TOKENS": 0.0005,   # USD, the offline model's nominal price
        "PRICE_PER_1K_OUTPUT_TOKENS": 0.0015,
        "LATENCY_MS": 0,                       # artificial latency of each offline call
    }
    HIERARCH_MODEL_TIMEOUT_S = 60              # per call, any provider
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from decimal import Decimal
from types import ModuleType
from typing import Any

from django.conf import settings

from governance.secret_redaction import SecretRedaction
from runs.engine import schemas
from runs.engine.ports import (
    LLM_ERROR,
    TIMEOUT,
    VALIDATION_ERROR,
    ModelError,
    ModelReply,
    ModelRequest,
)
from runs.engine.storable import storable

OFFLINE_PROVIDER = "local"
OFFLINE_DEFAULTS: dict[str, Any] = {
    "PRICE_PER_1K_INPUT_TOKENS": 0.0005,
    "PRICE_PER_1K_OUTPUT_TOKENS": 0.0015,
    "LATENCY_MS": 0,
}
DEFAULT_TIMEOUT_S = 60.0

_litellm: ModuleType | None = None
_litellm_lock = threading.Lock()
_THOUSAND = Decimal(1000)
_KEYISH = re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{8,}")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_PREFIXES = re.compile(r"^(?:(?:litellm\.)?\w*(?:Error|Exception|Timeout)(?::\s*|\s+-\s+))+")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def warm_up() -> None:
    """Import litellm now, in a daemon thread: a server that runs the engine itself (the
    inline executor) pays the seconds of its import when it starts, not in the first run
    a person starts. A call made meanwhile waits for the same import."""
    threading.Thread(target=litellm_module, name="hierarch-litellm-import", daemon=True).start()


def litellm_module() -> ModuleType:
    """litellm, imported once with the offline provider registered."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _litellm_lock:
        if _litellm is None:
            # Without this, litellm downloads its price map on import (and, with no network,
            # retries in a thread for seconds); runs.offline says the same, as it may come first.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            # litellm costs seconds and tens of MB to import: only a process that calls a
            # model pays it (the offline model subclasses litellm's, so it comes with it).
            import litellm

            from runs.offline import OfflineModel

            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                # litellm logs two INFO lines per call; unless LOGGING says otherwise, keep
                # only its warnings (the lines cost more than the offline model's answer).
                logger = logging.getLogger(name)
                if logger.level == logging.NOTSET:
                    logger.setLevel(logging.WARNING)
            litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" on stdout
            litellm.telemetry = False
            litellm.custom_provider_map = [
                *(p for p in litellm.custom_provider_map if p["provider"] != OFFLINE_PROVIDER),
                {"provider": OFFLINE_PROVIDER, "custom_handler": OfflineModel()},
            ]
            _litellm = litellm
    return _litellm


def chat_model_catalog() -> dict[str, list[str]]:
    """The chat models litellm knows, by provider (`local`, the offline model, first): what
    the designer offers to pick from. Read once from litellm's own price map."""
    global _catalog
    if _catalog is None:
        litellm = litellm_module()
        found: dict[str, set[str]] = {}
        for key, info in litellm.model_cost.items():
            provider = info.get("litellm_provider") if isinstance(info, dict) else None
            if not isinstance(provider, str) or info.get("mode") != "chat":
                continue
            name = key.removeprefix(f"{provider}/")
            found.setdefault(provider, set()).add(name)
        catalog = {OFFLINE_PROVIDER: ["offline"]}
        catalog.update((provider, sorted(found[provider])) for provider in sorted(found))
        _catalog = catalog
    return _catalog


_catalog: dict[str, list[str]] | None = None


class LiteLLMGateway:
    """The `ModelClient` of the product: litellm for every provider, `local` included.

    `timeout_s` and `offline` override the settings (tests, benchmarks); by default both are
    read from settings at each call, which costs a dictionary look-up.
    """

    def __init__(
        self, *, timeout_s: float | None = None, offline: dict[str, Any] | None = None
    ) -> None:
        self._timeout_s = timeout_s
        self._offline = offline

    def complete(self, request: ModelRequest) -> ModelReply:
        litellm = litellm_module()
        offline = self._offline_settings() if request.provider == OFFLINE_PROVIDER else None
        if offline is not None:
            _price_offline_model(litellm, request.model, offline)
        kwargs = self._arguments(request, offline)
        started = time.perf_counter()
        failure: ModelError | None = None
        try:
            response = litellm.completion(**kwargs)
        except Exception as exc:  # every failure becomes a ModelError, whatever raised it
            failure = model_error(exc, request)
        if failure is not None:
            # Raised outside the handler, so the original (whose text may hold the key) is
            # not chained to it as __context__ for a log to print.
            raise failure
        latency_ms = round((time.perf_counter() - started) * 1000)
        return self._reply(request, response, latency_ms, offline)

    def estimate_cost(self, request: ModelRequest) -> Decimal:
        """The most the call can cost, set aside against a budget before it is made: its
        prompt (bounded by its size in bytes: a token is at least one), and `max_tokens` of
        answer (else the model's own output limit), at the model's price. 0 when the price
        is unknown (the call is then checked only after)."""
        litellm = litellm_module()
        if request.provider == OFFLINE_PROVIDER:
            offline = self._offline_settings()
            prices = (
                float(offline["PRICE_PER_1K_INPUT_TOKENS"]) / 1000,
                float(offline["PRICE_PER_1K_OUTPUT_TOKENS"]) / 1000,
            )
            most_out = request.max_tokens or ESTIMATE_OUTPUT_TOKENS
        else:
            known = litellm.model_cost.get(f"{request.provider}/{request.model}") or (
                litellm.model_cost.get(request.model) or {}
            )
            prices = (
                float(known.get("input_cost_per_token") or 0),
                float(known.get("output_cost_per_token") or 0),
            )
            most_out = request.max_tokens or int(
                known.get("max_output_tokens") or ESTIMATE_OUTPUT_TOKENS
            )
        prompt = _most_prompt_tokens(request)
        cost = prompt * prices[0] + most_out * prices[1]
        return Decimal(f"{cost:.6f}") + Decimal("0.000001") if cost else Decimal(0)

    def count_tokens(self, model: str, text: str) -> int:
        try:
            return int(litellm_module().token_counter(model=model, text=text))
        except Exception:
            return len(text) // 4 + 1  # about four characters a token in English

    def _count_messages(self, request: ModelRequest) -> int:
        try:
            return int(
                litellm_module().token_counter(model=request.model, messages=list(request.messages))
            )
        except Exception:
            return sum(
                self.count_tokens(request.model, str(m.get("content"))) for m in request.messages
            )

    # --- request ---------------------------------------------------------------------------

    def _arguments(self, request: ModelRequest, offline: dict[str, Any] | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": f"{request.provider}/{request.model}",
            "messages": list(request.messages),
            "temperature": request.temperature,
            "top_p": request.top_p,
            "timeout": self._timeout(),
            # The engine's retry policy decides about retries, with its backoff and its
            # records; a client retrying silently underneath would hide attempts and time.
            "max_retries": 0,
        }
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if request.response_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": _schema_name(request),
                    "schema": request.response_schema,
                    "strict": False,
                },
            }
        if request.tools:
            kwargs["tools"] = [_tool(tool) for tool in request.tools]
            if request.tool_choice:
                kwargs["tool_choice"] = _tool_choice(request.tool_choice)
            # Our tools are plain functions, never MCP servers: skip litellm's MCP gateway
            # check, which imports the optional `mcp` package on every call with tools.
            kwargs["_skip_mcp_handler"] = True
        if request.api_base:
            kwargs["api_base"] = request.api_base
        if request.api_key:
            kwargs["api_key"] = request.api_key
        if offline is not None and offline["LATENCY_MS"]:
            kwargs["latency_ms"] = offline["LATENCY_MS"]
        if request.traceparent and offline is None:
            # The run's trace, for a provider (or a proxy before it) that continues traces;
            # the offline model has no spans to put under it.
            kwargs["extra_headers"] = {"traceparent": request.traceparent}
        return kwargs

    def _timeout(self) -> float:
        if self._timeout_s is not None:
            return self._timeout_s
        return float(getattr(settings, "HIERARCH_MODEL_TIMEOUT_S", DEFAULT_TIMEOUT_S))

    def _offline_settings(self) -> dict[str, Any]:
        given = self._offline
        if given is None:
            given = getattr(settings, "HIERARCH_OFFLINE_MODEL", None) or {}
        return {**OFFLINE_DEFAULTS, **given} if given else OFFLINE_DEFAULTS

    # --- reply -----------------------------------------------------------------------------

    def _reply(
        self,
        request: ModelRequest,
        response: Any,
        latency_ms: int,
        offline: dict[str, Any] | None,
    ) -> ModelReply:
        where = f"{request.provider}/{request.model}"
        if not getattr(response, "choices", None):
            raise ModelError(f"{where} answered with no choices", code=LLM_ERROR, retryable=True)
        choice = response.choices[0]
        message = choice.message
        # Text the database cannot store (NUL, a lone surrogate) is replaced, not refused.
        content = storable(message.content or "")
        prompt_tokens, completion_tokens = self._usage(request, response, content)
        tool_calls = getattr(message, "tool_calls", None) or []
        called = storable(_functions_called(where, request, tool_calls))
        tool_name, tool_arguments = (
            (called[0]["name"], called[0]["arguments"]) if called else (None, None)
        )
        parsed: Any = None
        if request.response_schema is not None and tool_name is None:
            parsed = storable(_decode_json(where, content))
            _validate(where, parsed, request.response_schema)
        raw: dict[str, Any] = {
            "id": getattr(response, "id", None),
            "model": getattr(response, "model", None),
            "finish_reason": getattr(choice, "finish_reason", None),
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }
        if tool_calls:
            raw["tool_calls"] = storable(
                [
                    {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                    for c in tool_calls
                ]
            )
        return ModelReply(
            content=content,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=_cost(response, prompt_tokens, completion_tokens, offline),
            latency_ms=latency_ms,
            provider=request.provider,
            model=request.model,
            parsed=parsed,
            tool_name=tool_name,
            tool_arguments=tool_arguments,
            raw=raw,
            tool_calls=called,
        )

    def _usage(self, request: ModelRequest, response: Any, content: str) -> tuple[int, int]:
        """The tokens of the call's prompt and answer, as the provider reports them; a provider
        that reports none still spent tokens: they are counted as litellm would."""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        if not prompt_tokens and not completion_tokens:
            prompt_tokens = self._count_messages(request)
            completion_tokens = self.count_tokens(request.model, content) if content else 0
        return prompt_tokens, completion_tokens


def _functions_called(
    where: str, request: ModelRequest, tool_calls: list[Any]
) -> tuple[dict[str, Any], ...]:
    """The functions the model called, in order: each {"id", "name", "arguments"} (decoded);
    an error when it called one it was not offered, or answered without the one it was told
    to call."""
    if not tool_calls:
        if request.tool_choice and request.tool_choice not in ("auto", "none"):
            raise ModelError(
                f"{where} answered without calling the function {request.tool_choice!r} "
                "it was asked to call",
                code=LLM_ERROR,
                retryable=True,
            )
        return ()
    offered = {_tool(t)["function"].get("name") for t in request.tools}
    called = []
    for index, call in enumerate(tool_calls):
        name = call.function.name
        if name not in offered:
            raise ModelError(
                f"{where} called the function {name!r}, which was not offered "
                f"(offered: {', '.join(sorted(n for n in offered if n))})",
                code=LLM_ERROR,
                retryable=True,
            )
        arguments = _tool_arguments(where, name, call.function.arguments)
        called.append(
            {
                "id": getattr(call, "id", None) or f"call_{index}",
                "name": name,
                "arguments": arguments,
            }
        )
    return tuple(called)


def _cost(
    response: Any, prompt_tokens: int, completion_tokens: int, offline: dict[str, Any] | None
) -> Decimal:
    """What the call cost: the offline model's nominal price, else the provider's."""
    if offline is None:
        return _provider_cost(response)
    return (
        Decimal(prompt_tokens) * Decimal(str(offline["PRICE_PER_1K_INPUT_TOKENS"]))
        + Decimal(completion_tokens) * Decimal(str(offline["PRICE_PER_1K_OUTPUT_TOKENS"]))
    ) / _THOUSAND


def _most_prompt_tokens(request: ModelRequest) -> int:
    """An upper bound of the prompt's tokens without a tokenizer: byte-level tokenizers
    never make a token of less than one byte; a few more per message for the roles."""
    size = sum(len(str(m.get("content") or "").encode()) + 8 for m in request.messages)
    # A reasoning loop's turns: the calls the model made before are in the prompt too.
    size += sum(
        len(json.dumps(m["tool_calls"]).encode()) for m in request.messages if m.get("tool_calls")
    )
    if request.tools:
        size += len(json.dumps(request.tools).encode())
    if request.response_schema:
        size += len(json.dumps(request.response_schema).encode())
    return size + 16


_priced: dict[str, tuple[float, float]] = {}
ESTIMATE_OUTPUT_TOKENS = 4096  # a call's answer when neither the call nor the model says


def _price_offline_model(litellm: ModuleType, model: str, offline: dict[str, Any]) -> None:
    """Enter an offline model name in litellm's price map, once per name and price.

    The offline model reads its price there and puts each answer's cost on it, which litellm
    then takes instead of pricing the response inside `completion()` (for a name missing from
    the map, litellm would search the whole map on every call).
    """
    prices = (
        float(offline["PRICE_PER_1K_INPUT_TOKENS"]) / 1000,
        float(offline["PRICE_PER_1K_OUTPUT_TOKENS"]) / 1000,
    )
    if _priced.get(model) == prices:
        return
    with _litellm_lock:
        litellm.register_model(
            {
                f"{OFFLINE_PROVIDER}/{model}": {
                    "input_cost_per_token": prices[0],
                    "output_cost_per_token": prices[1],
                    "cache_creation_input_token_cost": 0.0,
                    "cache_read_input_token_cost": 0.0,
                    "litellm_provider": OFFLINE_PROVIDER,
                    "mode": "chat",
                }
            }
        )
        _priced[model] = prices


def model_error(exc: BaseException, request: ModelRequest) -> ModelError:
    """A litellm (or other) failure as a ModelError, with no secret in its message."""
    if isinstance(exc, ModelError):
        return exc
    import openai  # already imported by litellm; its classes are the bases of litellm's

    litellm = litellm_module()
    where = f"{request.provider}/{request.model}"
    detail = _scrub(_exception_text(exc), request.api_key)
    if isinstance(exc, openai.APITimeoutError):  # litellm.Timeout is one
        return ModelError(f"{where} did not answer in time: {detail}", code=TIMEOUT)
    status = getattr(exc, "status_code", None)
    retryable_classes = (
        litellm.RateLimitError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.InternalServerError,
        openai.APIConnectionError,  # litellm.APIConnectionError is one
    )
    permanent_classes = (
        openai.BadRequestError,  # litellm's BadRequest, ContextWindowExceeded, ContentPolicy…
        openai.AuthenticationError,
        openai.PermissionDeniedError,
        openai.NotFoundError,
        openai.UnprocessableEntityError,
    )
    if isinstance(exc, retryable_classes):
        retryable = True
    elif isinstance(exc, permanent_classes):
        retryable = False
    elif isinstance(status, int):
        retryable = status in (408, 409, 425, 429) or status >= 500
    else:
        retryable = isinstance(exc, openai.APIError)
    label = _describe(exc, status)
    return ModelError(f"{where}: {label}: {detail}", code=LLM_ERROR, retryable=retryable)


# --- helpers ---------------------------------------------------------------------------------


def _schema_name(request: ModelRequest) -> str:
    schema = request.response_schema or {}
    title = schema.get("title") if isinstance(schema.get("title"), str) else ""
    name = _NAME_UNSAFE.sub("_", title or request.purpose.lower() or "answer").strip("_")
    return (name or "answer")[:64]


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return tool
    return {"type": "function", "function": tool}


def _tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _tool_arguments(where: str, name: str, arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        decoded = json.loads(arguments or "{}")
    except (TypeError, ValueError) as exc:
        raise ModelError(
            f"{where} called {name!r} with arguments that are not valid JSON ({exc}): "
            f"{_excerpt(str(arguments))}",
            code=LLM_ERROR,
            retryable=True,
        ) from None
    if not isinstance(decoded, dict):
        raise ModelError(
            f"{where} called {name!r} with arguments that are not a JSON object: "
            f"{_excerpt(str(arguments))}",
            code=LLM_ERROR,
            retryable=True,
        )
    return decoded


def _decode_json(where: str, content: str) -> Any:
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:  # models often wrap JSON in a Markdown code fence
        text = fenced.group(1)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ModelError(
            f"{where} answered text that is not valid JSON where JSON was asked for "
            f"({exc}): {_excerpt(content)}",
            code=LLM_ERROR,
            retryable=True,
        ) from None


def _validate(where: str, value: Any, schema: dict[str, Any]) -> None:
    import jsonschema  # cheap: already imported by litellm and the engine

    try:
        # The schema may be a designer's (an entity's output): its patterns on RE2, its
        # references only inside it.
        errors = list(schemas.user_validator(schema).iter_errors(value))
        error = jsonschema.exceptions.best_match(errors)
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.UnknownType) as exc:
        raise ModelError(
            f"the response schema asked of {where} is not a valid JSON Schema: {exc.message}",
            code=LLM_ERROR,
            retryable=False,
        ) from None
    fault = next((e for e in errors if isinstance(e, schemas.SchemaFault)), None)
    if fault is not None:
        # The schema itself cannot be met (a reference outside it, a pattern RE2 refuses):
        # asking the model again cannot help.
        path = "/".join(str(p) for p in fault.absolute_path) or "(root)"
        raise ModelError(
            f"the response schema asked of {where} cannot be used at {path}: {fault.message}",
            code=VALIDATION_ERROR,
            retryable=False,
        )
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise ModelError(
            f"{where} answered JSON that does not match the requested schema at {path}: "
            f"{_excerpt(error.message)}",
            code=LLM_ERROR,
            retryable=True,
        )


def _provider_cost(response: Any) -> Decimal:
    litellm = litellm_module()
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:  # a model missing from the price map costs what we know: nothing
        return Decimal(0)
    return Decimal(f"{cost or 0:.12f}").normalize()  # litellm's float, without its noise


def _exception_text(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    # litellm prefixes class names ("litellm.RateLimitError: RateLimitError: OpenAIException -
    # "); the label says it already.
    return _PREFIXES.sub("", str(text))


def _describe(exc: BaseException, status: Any) -> str:
    name = type(exc).__name__
    return f"{name} ({status})" if isinstance(status, int) else name


def _scrub(text: str, api_key: str | None) -> str:
    if api_key:
        # Every encoding of the whole key (an echoed request, a JSON-escaped error body).
        text = SecretRedaction([api_key]).text(text)
        if len(api_key) > 8:  # providers echo a key's beginning or end
            text = text.replace(api_key[:8], "***").replace(api_key[-6:], "***")
    return _excerpt(_KEYISH.sub(lambda m: m.group(1) + "-***", text))


def _excerpt(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
