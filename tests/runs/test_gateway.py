"""The real provider path: litellm's OpenAI provider against a fake server on loopback."""

from __future__ import annotations

import json
import socket
import time
from decimal import Decimal

import pytest

from runs.engine.ports import LLM_ERROR, TIMEOUT, ModelError, ModelRequest
from runs.gateway import LiteLLMGateway, litellm_module

pytestmark = pytest.mark.smoke

KEY = "sk-test-Zq8vN3xR7pL2wK9mT4yB6cD1"
MESSAGES = (
    {"role": "system", "content": "You write recruitment video scripts."},
    {"role": "user", "content": "Write a script for Acme's data analyst role."},
)
SCRIPT_SCHEMA = {
    "type": "object",
    "properties": {
        "script": {"type": "string"},
        "duration_seconds": {"type": "number", "minimum": 10, "maximum": 60},
    },
    "required": ["script", "duration_seconds"],
}
RENDER_TOOL = {
    "name": "render_video",
    "description": "Render the video from a script",
    "parameters": {
        "type": "object",
        "properties": {"script": {"type": "string"}, "captions": {"type": "boolean"}},
        "required": ["script"],
    },
}


@pytest.fixture
def gateway() -> LiteLLMGateway:
    return LiteLLMGateway()


@pytest.fixture
def ask(openai_server):
    def request(**fields) -> ModelRequest:
        values = {
            "provider": "openai",
            "model": "gpt-4o-mini",
            "messages": MESSAGES,
            "api_base": openai_server.base_url,
            "api_key": KEY,
            **fields,
        }
        return ModelRequest(**values)

    return request


def test_it_sends_the_prompt_and_the_key_and_returns_the_text(gateway, ask, openai_server):
    openai_server.reply_text(
        "Meet the team behind Acme's numbers.", prompt_tokens=31, completion_tokens=9
    )
    reply = gateway.complete(ask(temperature=0.2, top_p=0.9, max_tokens=300))

    assert reply.content == "Meet the team behind Acme's numbers."
    assert (reply.prompt_tokens, reply.completion_tokens) == (31, 9)
    assert (reply.provider, reply.model) == ("openai", "gpt-4o-mini")
    assert reply.latency_ms >= 0 and reply.raw["finish_reason"] == "stop"
    [sent] = openai_server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.messages == list(MESSAGES)
    assert sent.body["model"] == "gpt-4o-mini"
    assert (sent.body["temperature"], sent.body["top_p"]) == (0.2, 0.9)
    assert sent.body.get("max_tokens", sent.body.get("max_completion_tokens")) == 300
    assert "response_format" not in sent.body and "tools" not in sent.body


def test_a_known_model_costs_what_litellms_price_map_says(gateway, ask, openai_server):
    openai_server.reply_text("Hello.", prompt_tokens=1000, completion_tokens=500)
    reply = gateway.complete(ask())
    prices = litellm_module().model_cost["gpt-4o-mini"]
    expected = 1000 * prices["input_cost_per_token"] + 500 * prices["output_cost_per_token"]
    assert reply.cost_usd > 0
    assert float(reply.cost_usd) == pytest.approx(expected)


def test_a_model_missing_from_the_price_map_costs_nothing(gateway, ask, openai_server):
    openai_server.reply_text("Hello.")
    reply = gateway.complete(ask(model="in-house-finetune-v3"))
    assert reply.cost_usd == Decimal(0)
    assert reply.content == "Hello."


def test_it_asks_for_json_with_the_schema_and_decodes_the_answer(gateway, ask, openai_server):
    openai_server.reply_json({"script": "Numbers tell stories.", "duration_seconds": 30})
    reply = gateway.complete(ask(response_schema=SCRIPT_SCHEMA, purpose="THOUGHT"))

    assert reply.parsed == {"script": "Numbers tell stories.", "duration_seconds": 30}
    response_format = openai_server.requests[0].body["response_format"]
    assert response_format == {
        "type": "json_schema",
        "json_schema": {"name": "thought", "schema": SCRIPT_SCHEMA, "strict": False},
    }


def test_the_schema_title_names_the_response_format(gateway, ask, openai_server):
    openai_server.reply_json({"script": "x", "duration_seconds": 20})
    gateway.complete(ask(response_schema={**SCRIPT_SCHEMA, "title": "Video script (v2)"}))
    assert (
        openai_server.requests[0].body["response_format"]["json_schema"]["name"]
        == "Video_script_v2"
    )


def test_json_wrapped_in_a_code_fence_is_accepted(gateway, ask, openai_server):
    openai_server.reply_content('```json\n{"script": "Hi.", "duration_seconds": 15}\n```')
    assert gateway.complete(ask(response_schema=SCRIPT_SCHEMA)).parsed["duration_seconds"] == 15


def test_text_that_is_not_json_where_json_was_asked_is_a_retryable_error(
    gateway, ask, openai_server
):
    openai_server.reply_content("Sure! Here is your script: Numbers tell stories.")
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask(response_schema=SCRIPT_SCHEMA))
    assert caught.value.code == LLM_ERROR and caught.value.retryable
    assert "not valid JSON" in str(caught.value)
    assert "Sure! Here is your script" in str(caught.value)


def test_json_that_breaks_the_schema_is_a_retryable_error_naming_the_field(
    gateway, ask, openai_server
):
    openai_server.reply_json({"script": "Hi.", "duration_seconds": 600})
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask(response_schema=SCRIPT_SCHEMA))
    assert caught.value.code == LLM_ERROR and caught.value.retryable
    assert "does not match the requested schema at duration_seconds" in str(caught.value)


def test_it_offers_tools_and_decodes_the_call(gateway, ask, openai_server):
    openai_server.reply_tool_call(
        "render_video", {"script": "Numbers tell stories.", "captions": True}
    )
    reply = gateway.complete(
        ask(tools=(RENDER_TOOL,), tool_choice="render_video", purpose="TOOL_ARGUMENTS")
    )

    assert reply.tool_name == "render_video"
    assert reply.tool_arguments == {"script": "Numbers tell stories.", "captions": True}
    sent = openai_server.requests[0].body
    assert sent["tools"] == [{"type": "function", "function": RENDER_TOOL}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "render_video"}}
    # Nothing of litellm's own bookkeeping leaks into the provider's request.
    assert set(sent) == {"model", "messages", "temperature", "top_p", "tools", "tool_choice"}


def test_tools_in_the_openai_wrapper_pass_as_they_are(gateway, ask, openai_server):
    openai_server.reply_tool_call("render_video", {"script": "x"})
    wrapped = {"type": "function", "function": RENDER_TOOL}
    gateway.complete(ask(tools=(wrapped,), tool_choice="auto"))
    sent = openai_server.requests[0].body
    assert sent["tools"] == [wrapped] and sent["tool_choice"] == "auto"


def test_text_the_database_cannot_store_comes_back_replaced(gateway, ask, openai_server):
    """A provider may send NUL or a lone surrogate (escaped in its JSON): each becomes U+FFFD
    in the text, the decoded answer and a tool call's arguments, keys included."""
    openai_server.reply_text("a\x00b \ud800")
    assert gateway.complete(ask()).content == "a\ufffdb \ufffd"

    openai_server.reply_json({"script": "x\x00", "duration_seconds": 20})
    reply = gateway.complete(ask(response_schema=SCRIPT_SCHEMA, purpose="THOUGHT"))
    assert reply.parsed == {"script": "x\ufffd", "duration_seconds": 20}

    openai_server.reply_tool_call("render_video", {"script": "\ud800", "k\x00": 1})
    reply = gateway.complete(ask(tools=(RENDER_TOOL,), tool_choice="render_video"))
    assert reply.tool_arguments == {"script": "\ufffd", "k\ufffd": 1}
    assert "\x00" not in str(reply.raw)  # the raw arguments keep the escape, as text


def test_tool_arguments_that_are_not_json_are_a_retryable_error(gateway, ask, openai_server):
    openai_server.reply_tool_call("render_video", '{"script": "unterminated')
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask(tools=(RENDER_TOOL,), tool_choice="render_video"))
    assert caught.value.code == LLM_ERROR and caught.value.retryable
    assert "not valid JSON" in str(caught.value)


def test_a_call_of_a_function_not_offered_is_a_retryable_error(gateway, ask, openai_server):
    openai_server.reply_tool_call("drop_database", {})
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask(tools=(RENDER_TOOL,)))
    assert caught.value.retryable and "drop_database" in str(caught.value)


def test_text_instead_of_the_required_call_is_a_retryable_error(gateway, ask, openai_server):
    openai_server.reply_text("I would rather not.")
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask(tools=(RENDER_TOOL,), tool_choice="render_video"))
    assert caught.value.retryable and "render_video" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (500, "server_error", True),
        (502, "server_error", True),
        (503, "server_error", True),
        (429, "rate_limit_exceeded", True),
        (400, "invalid_request_error", False),
        (401, "invalid_api_key", False),
        (403, "permission_denied", False),
        (404, "not_found_error", False),
        (422, "invalid_request_error", False),
    ],
)
def test_each_failure_class_maps_to_an_llm_error(
    gateway, ask, openai_server, status, kind, retryable
):
    # The server echoes the key, as some providers do; it must not reach our message.
    openai_server.reply_error(
        status, f"Failure {status}: incorrect API key provided: {KEY}", kind=kind
    )
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask())
    error = caught.value
    assert (error.code, error.retryable) == (LLM_ERROR, retryable)
    assert f"Failure {status}" in str(error) and "openai/gpt-4o-mini" in str(error)
    assert KEY not in str(error) and KEY[8:] not in str(error)
    assert error.__cause__ is None and error.__context__ is None  # nothing chained
    # One request: no client retries underneath the engine's retry policy.
    assert len(openai_server.requests) == 1


def test_an_html_error_page_is_a_retryable_error(gateway, ask, openai_server):
    openai_server.reply_raw(502, b"<html><body>Bad gateway</body></html>")
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask())
    assert caught.value.code == LLM_ERROR and caught.value.retryable


def test_a_slow_answer_is_a_retryable_timeout(gateway, ask, openai_server, settings):
    settings.HIERARCH_MODEL_TIMEOUT_S = 0.5
    openai_server.reply_slow(10)
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask())
    assert caught.value.code == TIMEOUT and caught.value.retryable
    assert time.monotonic() - started < 5
    assert KEY not in str(caught.value)


def test_a_timeout_given_to_the_gateway_wins_over_settings(ask, openai_server, settings):
    settings.HIERARCH_MODEL_TIMEOUT_S = 60
    openai_server.reply_slow(10)
    with pytest.raises(ModelError) as caught:
        LiteLLMGateway(timeout_s=0.3).complete(ask())
    assert caught.value.code == TIMEOUT


def test_a_server_that_is_not_there_is_a_retryable_error(gateway, ask, settings):
    settings.HIERARCH_MODEL_TIMEOUT_S = 2
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask(api_base=f"http://127.0.0.1:{port}/v1"))
    assert caught.value.code in (LLM_ERROR, TIMEOUT) and caught.value.retryable
    assert KEY not in str(caught.value)


def test_the_recorded_raw_reply_is_small_and_json(gateway, ask, openai_server):
    openai_server.reply_tool_call("render_video", {"script": "x"})
    reply = gateway.complete(ask(tools=(RENDER_TOOL,)))
    assert json.loads(json.dumps(reply.raw)) == reply.raw
    assert reply.raw["usage"] == {"prompt_tokens": 40, "completion_tokens": 15}
    assert reply.raw["tool_calls"][0]["name"] == "render_video"


def test_a_server_that_reports_no_usage_still_gets_its_tokens_counted(gateway, ask, openai_server):
    openai_server.reply_text("Numbers tell stories at Acme.", report_usage=False)
    reply = gateway.complete(ask())
    assert reply.prompt_tokens > 10 and reply.completion_tokens > 3


def test_an_answer_with_no_choices_is_a_retryable_error(gateway, ask, openai_server):
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [],
    }
    openai_server.reply_raw(200, json.dumps(body).encode(), "application/json")
    with pytest.raises(ModelError) as caught:
        gateway.complete(ask())
    assert caught.value.code == LLM_ERROR and caught.value.retryable


# -- litellm's success logging ------------------------------------------------------------------


def offline_request() -> ModelRequest:
    return ModelRequest(provider="local", model="offline", messages=MESSAGES)


def test_a_success_callback_configured_in_litellm_hears_each_call(gateway):
    # litellm's own logging is left as litellm does it (in its logging thread, after the call
    # returns): a callback a deployment configures in litellm hears every call through the
    # gateway. A model name of its own keeps out the logging of earlier tests' calls.
    import threading

    litellm = litellm_module()
    heard: list[str] = []
    both = threading.Event()

    def callback(kwargs, response, start_time, end_time) -> None:  # litellm's signature
        if response.model == "local/callback-heard":
            heard.append(response.model)
        if len(heard) >= 2:
            both.set()

    request = ModelRequest(provider="local", model="callback-heard", messages=MESSAGES)
    litellm.success_callback.append(callback)
    try:
        gateway.complete(request)
        gateway.complete(request)
        assert both.wait(10)
        time.sleep(0.2)  # a third would be heard by now
    finally:
        litellm.success_callback.remove(callback)
    assert heard == ["local/callback-heard"] * 2
