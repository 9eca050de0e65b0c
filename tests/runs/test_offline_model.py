"""The built-in offline model, through the real litellm and the gateway (never patched)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from runs.engine import summaries
from runs.engine.ports import LLM_ERROR, TIMEOUT, ModelError, ModelRequest
from runs.gateway import LiteLLMGateway, litellm_module
from tests.support.demo_schemas import FIXTURE_SCHEMAS, standard

pytestmark = pytest.mark.smoke

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = (
    {"role": "system", "content": "You are a recruitment content analyst."},
    {"role": "user", "content": "Extract the key facts from: Senior Python engineer at Acme."},
)
EXTRACTION = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "requirements": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "extraction_confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "seniority": {"enum": ["junior", "mid", "senior"]},
    },
    "required": ["title", "requirements", "extraction_confidence", "seniority"],
    "additionalProperties": False,
}
PARSE_TOOL = {
    "name": "parse_job_description",
    "description": "Extract structured information from job description text",
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 10},
            "extract_fields": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["text"],
    },
}
RENDER_TOOL = {
    "name": "render_video",
    "description": "Render a video",
    "parameters": {
        "type": "object",
        "properties": {"script": {"type": "string"}, "captions": {"type": "boolean"}},
        "required": ["script", "captions"],
    },
}


def offline(**fields) -> ModelRequest:
    return ModelRequest(provider="local", model="offline", messages=MESSAGES, **fields)


@pytest.fixture
def gateway() -> LiteLLMGateway:
    return LiteLLMGateway()


def test_it_answers_the_same_messages_the_same_way(gateway):
    first, again = gateway.complete(offline()), gateway.complete(offline())
    assert first.content == again.content
    assert (first.prompt_tokens, first.completion_tokens) == (
        again.prompt_tokens,
        again.completion_tokens,
    )
    other = gateway.complete(
        ModelRequest(
            provider="local", model="offline", messages=({"role": "user", "content": "Hello?"},)
        )
    )
    assert other.content != first.content


def test_any_model_name_works_under_the_local_provider(gateway):
    reply = gateway.complete(
        ModelRequest(provider="local", model="tiny-demo-7b", messages=MESSAGES)
    )
    assert reply.content and reply.model == "tiny-demo-7b" and reply.provider == "local"


def test_it_answers_plain_text_without_a_schema_or_tools(gateway):
    reply = gateway.complete(offline())
    assert "Senior Python engineer at Acme" in reply.content
    assert reply.parsed is None and reply.tool_name is None
    assert reply.raw["finish_reason"] == "stop"


def test_it_answers_json_valid_against_the_requested_schema(gateway):
    reply = gateway.complete(offline(response_schema=EXTRACTION, purpose="JUDGE"))
    jsonschema.validate(reply.parsed, EXTRACTION)
    assert json.loads(reply.content) == reply.parsed


def test_it_answers_every_output_schema_of_the_demo_hierarchy(gateway):
    for label, schema in FIXTURE_SCHEMAS:
        request = ModelRequest(
            provider="local",
            model="offline",
            messages=({"role": "user", "content": f"Produce {label}"},),
            response_schema=standard(schema),
        )
        jsonschema.validate(gateway.complete(request).parsed, standard(schema))


def test_a_summary_request_gets_a_summary_of_what_it_was_given(gateway):
    earlier = "\n".join(
        [
            "Summary of iterations 1-2: a first draft, then a shorter one",
            'Iteration 3: {"text": "' + "a long draft " * 20 + '"}',
        ]
    )
    messages = (
        {"role": "system", "content": summaries.PASSES_PROMPT},
        {"role": "user", "content": f"<earlier>\n{earlier}\n</earlier>"},
    )
    request = replace(
        offline(response_schema=summaries.SUMMARY_SCHEMA, purpose="SUMMARY"), messages=messages
    )
    reply = gateway.complete(request)

    jsonschema.validate(reply.parsed, summaries.SUMMARY_SCHEMA)
    text = reply.parsed["summary"]
    assert text.startswith("2 earlier entries. Summary of iterations 1-2: a first draft")
    assert 'Iteration 3: {"text": "a long draft' in text and "…" in text
    assert gateway.complete(request).parsed == reply.parsed  # the same every time
    # However long the material, a summary stays short: summaries of summaries do not grow.
    many = "\n".join(f"Item: {n} " + "x" * 90 for n in range(100))
    messages = ({"role": "user", "content": f"<earlier>\n{many}\n</earlier>"},)
    request = replace(offline(response_schema=summaries.SUMMARY_SCHEMA), messages=messages)
    assert len(gateway.complete(request).parsed["summary"]) == 800


def test_it_calls_the_named_tool_with_arguments_valid_against_its_parameters(gateway):
    reply = gateway.complete(
        offline(
            tools=(RENDER_TOOL, PARSE_TOOL),
            tool_choice="parse_job_description",
            purpose="TOOL_ARGUMENTS",
        )
    )
    assert reply.tool_name == "parse_job_description"
    jsonschema.validate(reply.tool_arguments, PARSE_TOOL["parameters"])
    assert reply.raw["finish_reason"] == "tool_calls"
    assert reply.raw["tool_calls"][0]["name"] == "parse_job_description"


def test_offered_tools_to_choose_from_it_calls_those_that_fit_the_task(gateway):
    # "Extract" is in the task and in the parser's description; nothing of the renderer's is.
    reply = gateway.complete(offline(tools=(RENDER_TOOL, PARSE_TOOL)))
    assert [call["name"] for call in reply.tool_calls] == ["parse_job_description"]
    assert reply.tool_name == "parse_job_description"
    jsonschema.validate(reply.tool_arguments, PARSE_TOOL["parameters"])
    assert reply.tool_calls == gateway.complete(offline(tools=(RENDER_TOOL, PARSE_TOOL))).tool_calls


def test_when_no_tool_fits_the_task_it_calls_the_first(gateway):
    reply = gateway.complete(offline(tools=(RENDER_TOOL,), tool_choice="auto"))
    assert [call["name"] for call in reply.tool_calls] == ["render_video"]
    jsonschema.validate(reply.tool_arguments, RENDER_TOOL["parameters"])


def test_it_calls_every_tool_that_fits_with_values_from_the_input(gateway):
    lookup = {
        "name": "lookup_company",
        "description": "Look up a company's facts",
        "parameters": {
            "type": "object",
            "properties": {"company": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["company"],
        },
    }
    messages = (
        MESSAGES[0],
        {
            "role": "user",
            "content": 'Extract the key facts of the company.\n\nInput:\n{"company": "Acme"}',
        },
    )
    request = ModelRequest(
        provider="local", model="offline", messages=messages, tools=(PARSE_TOOL, lookup)
    )
    reply = gateway.complete(request)
    assert [call["name"] for call in reply.tool_calls] == [
        "parse_job_description",
        "lookup_company",
    ]
    assert reply.tool_calls[1]["arguments"]["company"] == "Acme"
    assert len({call["id"] for call in reply.tool_calls}) == 2


def test_once_a_tool_returned_it_answers_in_the_schema_saying_what_the_tools_returned(gateway):
    first = gateway.complete(offline(tools=(PARSE_TOOL,), response_schema=EXTRACTION))
    (call,) = first.tool_calls
    conversation = (
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": '{"title": "Senior engineer"}'},
    )
    request = ModelRequest(
        provider="local",
        model="offline",
        messages=conversation,
        tools=(PARSE_TOOL,),
        response_schema=EXTRACTION,
    )
    reply = gateway.complete(request)
    assert reply.tool_calls == () and reply.tool_name is None
    jsonschema.validate(reply.parsed, EXTRACTION)
    assert "Senior engineer" in reply.parsed["title"]
    assert reply.prompt_tokens > first.prompt_tokens  # the tool turn counts in the prompt


def test_with_tool_choice_none_it_answers_text(gateway):
    reply = gateway.complete(offline(tools=(PARSE_TOOL,), tool_choice="none"))
    assert reply.tool_name is None and reply.content


def test_a_tool_choice_naming_no_offered_tool_is_a_permanent_error(gateway):
    with pytest.raises(ModelError) as caught:
        gateway.complete(offline(tools=(PARSE_TOOL,), tool_choice="delete_everything"))
    assert caught.value.code == LLM_ERROR and not caught.value.retryable
    assert "delete_everything" in str(caught.value)


def test_it_reports_the_tokens_litellm_counts():
    litellm = litellm_module()
    reply = LiteLLMGateway().complete(offline())
    assert reply.prompt_tokens == litellm.token_counter(model="offline", messages=list(MESSAGES))
    assert reply.completion_tokens == litellm.token_counter(model="offline", text=reply.content)
    longer = LiteLLMGateway().complete(
        ModelRequest(
            provider="local",
            model="offline",
            messages=({"role": "user", "content": "Describe the role in detail. " * 50},),
        )
    )
    assert longer.prompt_tokens > 10 * reply.prompt_tokens / 2


def test_a_schema_or_tools_count_as_prompt_tokens(gateway):
    plain = gateway.complete(offline())
    assert gateway.complete(offline(response_schema=EXTRACTION)).prompt_tokens > plain.prompt_tokens
    assert gateway.complete(offline(tools=(PARSE_TOOL,))).prompt_tokens > plain.prompt_tokens


def test_it_costs_its_tokens_at_the_nominal_prices(gateway):
    reply = gateway.complete(offline(response_schema=EXTRACTION))
    expected = (
        Decimal(reply.prompt_tokens) * Decimal("0.0005")
        + Decimal(reply.completion_tokens) * Decimal("0.0015")
    ) / 1000
    assert reply.cost_usd == expected > 0


def test_the_prices_come_from_settings(gateway, settings):
    settings.HIERARCH_OFFLINE_MODEL = {
        "PRICE_PER_1K_INPUT_TOKENS": 1,
        "PRICE_PER_1K_OUTPUT_TOKENS": 2,
    }
    reply = gateway.complete(offline())
    assert reply.cost_usd == Decimal(reply.prompt_tokens + 2 * reply.completion_tokens) / 1000
    # litellm knows the same price, so its own cost reports agree with ours.
    litellm = litellm_module()
    response = litellm.completion(model="local/offline", messages=list(MESSAGES))
    assert litellm.completion_cost(completion_response=response) == pytest.approx(
        float(reply.cost_usd)
    )


@pytest.mark.parametrize(
    ("fields", "optional"),
    [
        ({}, {}),
        (
            {"response_schema": EXTRACTION},
            {"response_format": {"type": "json_schema", "json_schema": {"schema": EXTRACTION}}},
        ),
        (
            {"tools": (PARSE_TOOL,), "tool_choice": PARSE_TOOL["name"]},
            {"tools": [{"type": "function", "function": PARSE_TOOL}]},
        ),
    ],
    ids=["text", "schema", "tool"],
)
def test_its_answer_carries_the_cost_litellm_would_price(gateway, settings, fields, optional):
    settings.HIERARCH_OFFLINE_MODEL = {
        "PRICE_PER_1K_INPUT_TOKENS": 0.7,
        "PRICE_PER_1K_OUTPUT_TOKENS": 2.1,
    }
    reply = gateway.complete(offline(**fields))  # enters the price in litellm's map
    litellm = litellm_module()
    from runs.offline import answer

    response = answer("offline", list(MESSAGES), optional)
    assert response.usage.prompt_tokens == reply.prompt_tokens
    stamped = response._hidden_params["response_cost"]
    assert stamped == litellm.completion_cost(completion_response=response)
    assert stamped == pytest.approx(float(reply.cost_usd), rel=1e-12)
    # litellm takes the cost on the answer as it is.
    through = litellm.completion(model="local/offline", messages=list(MESSAGES), **optional)
    assert through._hidden_params["response_cost"] == stamped


def test_a_model_missing_from_the_price_map_or_priced_in_tiers_is_left_to_litellm():
    litellm = litellm_module()
    from runs.offline import answer

    unpriced = answer("not-in-any-price-map", list(MESSAGES), {})
    assert "response_cost" not in unpriced._hidden_params
    litellm.register_model(
        {
            "local/tiered-offline": {
                "input_cost_per_token": 1e-6,
                "output_cost_per_token": 2e-6,
                "input_cost_per_token_above_200k_tokens": 2e-6,
                "litellm_provider": "local",
                "mode": "chat",
            }
        }
    )
    assert "response_cost" not in answer("tiered-offline", list(MESSAGES), {})._hidden_params
    response = litellm.completion(model="local/tiered-offline", messages=list(MESSAGES))
    assert response._hidden_params["response_cost"] == pytest.approx(
        response.usage.prompt_tokens * 1e-6 + response.usage.completion_tokens * 2e-6
    )


@pytest.mark.parametrize("model", ["offline", "gpt-4o-mini", "claude-3-5-sonnet"])
def test_it_counts_prompts_as_litellm_does_for_any_message_shape(model):
    litellm = litellm_module()
    from runs.offline import prompt_token_count

    long = "Describe the role in detail, with every duty and benefit. " * 400  # many chunks
    shapes = [
        list(MESSAGES),
        [{"role": "user", "content": long}, {"role": "assistant", "content": ""}],
        [{"role": "system", "content": long * 3}, {"role": "user", "content": "Go."}],  # not kept
        [{"role": "developer", "content": "héllo wörld 日本語 <|endoftext|> 🚀"}],
        [],
        [{"role": "user", "content": "Hi", "name": "bob"}],
        [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ],
    ]
    for messages in shapes:
        assert prompt_token_count(model, messages) == litellm.token_counter(
            model=model, messages=messages
        ), messages


def test_a_token_limit_cuts_a_text_answer_like_a_real_model(gateway):
    reply = gateway.complete(offline(max_tokens=5))
    assert reply.completion_tokens <= 5
    assert reply.raw["finish_reason"] == "length"


def test_artificial_latency_comes_from_settings(gateway, settings):
    settings.HIERARCH_OFFLINE_MODEL = {"LATENCY_MS": 60}
    assert gateway.complete(offline()).latency_ms >= 60


def test_latency_past_the_timeout_is_a_retryable_timeout(settings):
    settings.HIERARCH_OFFLINE_MODEL = {"LATENCY_MS": 5_000}
    settings.HIERARCH_MODEL_TIMEOUT_S = 0.1
    with pytest.raises(ModelError) as caught:
        LiteLLMGateway().complete(offline())
    assert caught.value.code == TIMEOUT and caught.value.retryable


def test_litellm_reaches_it_directly_too():
    litellm = litellm_module()
    response = litellm.completion(
        model="local/offline",
        messages=list(MESSAGES),
        response_format={"type": "json_object"},
    )
    assert isinstance(json.loads(response.choices[0].message.content), dict)
    assert (
        response.usage.total_tokens
        == response.usage.prompt_tokens + response.usage.completion_tokens
    )


def test_it_answers_asynchronous_calls():
    litellm = litellm_module()
    response = asyncio.run(litellm.acompletion(model="local/offline", messages=list(MESSAGES)))
    assert response.choices[0].message.content == LiteLLMGateway().complete(offline()).content


def test_concurrent_calls_from_threads_answer_as_sequential_ones(gateway):
    requests = [
        ModelRequest(
            provider="local",
            model="offline",
            messages=({"role": "user", "content": f"Step {n}"},),
            response_schema=EXTRACTION,
        )
        for n in range(16)
    ]
    sequential = [gateway.complete(r).parsed for r in requests]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(lambda r: gateway.complete(r).parsed, requests)) == sequential


def test_count_tokens_uses_litellms_tokenizer(gateway):
    assert gateway.count_tokens("offline", "") == 0
    short, long = (
        gateway.count_tokens("offline", "one two"),
        gateway.count_tokens("offline", "one two " * 100),
    )
    assert 0 < short < long
    assert gateway.count_tokens("gpt-4o-mini", "hello world") == 2


def test_django_starts_without_importing_litellm():
    # litellm takes seconds to import: the gateway imports it on the first call, not before.
    code = (
        "import sys, django; django.setup(); import runs.gateway, runs.engine.synthesis; "
        "assert 'litellm' not in sys.modules, 'litellm imported at startup'"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.setdefault("SECRET_KEY", "x" * 60)
    result = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
