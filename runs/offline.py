"""The built-in offline model: a litellm custom provider named `local`.

`litellm.completion(model="local/<any name>", ...)` reaches `OfflineModel.completion`, which
answers deterministically from the messages, with no key and no network:

- `response_format` of type `json_schema`: JSON valid against that schema (`json_object`: a
  small object);
- `tools` with a `tool_choice` naming one: a call of that function with arguments valid
  against its parameters;
- `tools` offered to choose from (no `tool_choice`, or `auto`/`required`) and no tool result
  in the conversation yet: a tool-using agent's first turn. It calls every offered tool whose
  name or description shares a word with the task (the user's messages), the first one when
  none does, each with arguments valid against its parameters, values taken from the input
  where a property's name matches one of its keys. Once a tool result is in the
  conversation, it answers (below), saying what the tools returned where the answer has text;
- otherwise: a short prose answer.

Two schemas are recognised by their titles and answered from what they are given: the BIAS
content filter's judge (`governance/safety.py`): `bias_judge_answer` flags the text by a small
keyword list, so the filter does something visible offline; and a summary of earlier passes
or memory items (`runs/engine/summaries.py`): `summary_answer` keeps the start of each line
it is given, so a summary offline says what it summarises.

Usage carries realistic token counts (litellm's tokenizer on the prompt, the schema or tools
offered, and the answer) so budgets and dashboards behave as with a paid model. A `latency_ms`
completion parameter makes it slow on purpose; a latency past the call's `timeout` raises
litellm's Timeout like a real provider.

The answer carries its own cost (`_hidden_params["response_cost"]`) at the price litellm's map
holds for `local/<model>` (entered by the gateway), so litellm takes it as it is instead of
pricing the response again inside `completion()`.

Imported by the model gateway (`runs/gateway.py`); whichever of the two is imported first
keeps litellm from downloading its price map.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
import time
from typing import Any

# Without this, litellm downloads its price map on import (and, with no network, retries in a
# thread for seconds); this module may be the first to import it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402 - after the line above
from litellm.exceptions import BadRequestError, Timeout
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Choices,
    Function,
    Message,
    ModelResponse,
    Usage,
)

from runs.engine.summaries import SUMMARY_TITLE
from runs.engine.synthesis import synthesize, text_answer

PROVIDER = "local"

# Tokens a provider adds around each call's tools or response schema; counted once per call.
_OVERHEAD_TOKENS = 8


class OfflineModel(CustomLLM):
    """Deterministic answers for any model name under the `local` provider."""

    def completion(
        self,
        model: str,
        messages: list[dict[str, Any]],
        api_base: str | None,
        custom_prompt_dict: dict[str, Any],
        model_response: ModelResponse,
        print_verbose: Any,
        encoding: Any,
        api_key: str | None,
        logging_obj: Any,
        optional_params: dict[str, Any],
        acompletion: Any = None,
        litellm_params: dict[str, Any] | None = None,
        logger_fn: Any = None,
        headers: dict[str, Any] | None = None,
        timeout: float | Any | None = None,
        client: Any = None,
    ) -> ModelResponse:
        _wait(model, optional_params.get("latency_ms"), timeout)
        return answer(model, messages, optional_params, model_response)

    async def acompletion(
        self,
        model: str,
        messages: list[dict[str, Any]],
        api_base: str | None,
        custom_prompt_dict: dict[str, Any],
        model_response: ModelResponse,
        print_verbose: Any,
        encoding: Any,
        api_key: str | None,
        logging_obj: Any,
        optional_params: dict[str, Any],
        acompletion: Any = None,
        litellm_params: dict[str, Any] | None = None,
        logger_fn: Any = None,
        headers: dict[str, Any] | None = None,
        timeout: float | Any | None = None,
        client: Any = None,
    ) -> ModelResponse:
        latency_s = _latency_s(optional_params.get("latency_ms"))
        limit = _timeout_s(timeout)
        if latency_s:
            await asyncio.sleep(min(latency_s, limit) if limit else latency_s)
        if limit and latency_s > limit:
            raise _timeout_error(model, limit)
        return answer(model, messages, optional_params, model_response)


def answer(
    model: str,
    messages: list[dict[str, Any]],
    optional_params: dict[str, Any],
    model_response: ModelResponse | None = None,
) -> ModelResponse:
    """The offline model's reply to one call, as litellm's ModelResponse."""
    seed = _seed(messages)
    response = model_response if model_response is not None else ModelResponse()
    prompt_tokens = prompt_token_count(model, messages)
    response_format = optional_params.get("response_format")
    tools = optional_params.get("tools") or []
    tool_choice = optional_params.get("tool_choice")
    schema = _response_schema(response_format)
    chosen = _chosen_tools(tools, tool_choice, messages)
    results = _tool_results(messages)

    planned: list[tuple[dict[str, Any], Any]] = []  # the calls of this turn, with arguments
    given = _given_input(messages) if chosen else {}
    for tool in chosen:
        function = tool.get("function", tool)
        if function.get("name") == DELEGATE:  # a hire per part of the task
            planned += [(function, hire) for hire in _hires(function, messages, given)]
            continue
        parameters = function.get("parameters") or {}
        planned.append(
            (function, _from_input(parameters, synthesize(parameters, seed=seed), given))
        )

    if planned:
        calls, completion_tokens = [], 0
        for index, (function, value) in enumerate(planned):
            arguments = json.dumps(value)
            calls.append(
                ChatCompletionMessageToolCall(
                    id=f"call_{seed[:20]}_{index}",
                    type="function",
                    function=Function(name=function["name"], arguments=arguments),
                )
            )
            completion_tokens += _count_repeated(model, function["name"]) + _count(model, arguments)
        message = Message(content=None, role="assistant", tool_calls=calls)
        finish_reason = "tool_calls"
        prompt_tokens += _count_repeated(model, json.dumps(tools)) + _OVERHEAD_TOKENS
    elif schema is not None:
        value = bias_judge_answer(schema, messages)
        if value is None:
            value = summary_answer(schema, messages)
        if value is None:
            value = synthesize(schema, seed=seed)
            if results:
                value = _telling(schema, value, results)
        content = json.dumps(value, ensure_ascii=False)
        message = Message(content=content, role="assistant")
        finish_reason = "stop"
        completion_tokens = _count(model, content)
        prompt_tokens += _count_repeated(model, json.dumps(schema)) + _OVERHEAD_TOKENS
    else:
        content = text_answer(messages, seed=seed)
        if results:
            content = f"{_results_text(results)} {content}"
        finish_reason = "stop"
        completion_tokens = _count(model, content)
        limit = optional_params.get("max_tokens")
        if isinstance(limit, int) and 0 < limit < completion_tokens:
            # Cut like a real model at its token limit, and say so.
            words = content.split()
            content = " ".join(words[: max(1, len(words) * limit // completion_tokens)])
            completion_tokens = _count(model, content)
            finish_reason = "length"
        message = Message(content=content, role="assistant")

    response.choices = [Choices(finish_reason=finish_reason, index=0, message=message)]
    response.model = f"{PROVIDER}/{model}"
    response.usage = Usage(  # type: ignore[attr-defined]
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
    _stamp_cost(response, model, prompt_tokens, completion_tokens)
    return response


def _seed(messages: list[dict[str, Any]]) -> str:
    text = json.dumps(messages, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _response_schema(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else {"type": "object"}
    if kind == "json_object":
        return {"type": "object", "properties": {"answer": {"type": "string"}}}
    return None


def _chosen_tools(
    tools: list[dict[str, Any]], tool_choice: Any, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The tools this turn calls: the one `tool_choice` names; else, before any tool result
    is in the conversation, those that fit the task (at least one); else none."""
    if not tools or tool_choice == "none":
        return []
    wanted = None
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
    elif isinstance(tool_choice, str) and tool_choice not in ("auto", "required"):
        wanted = tool_choice
    if wanted:
        for tool in tools:
            if tool.get("function", tool).get("name") == wanted:
                return [tool]
        raise BadRequestError(
            message=f"tool_choice names {wanted!r}, which is not among the tools offered",
            model=wanted,
            llm_provider=PROVIDER,
        )
    if _tool_results(messages):
        return []  # it read what its tools returned: it answers now
    task = set()
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            task |= _words(message["content"])
    hires = [tool for tool in tools if tool.get("function", tool).get("name") == DELEGATE]
    others = [tool for tool in tools if tool not in hires]
    fitting = [tool for tool in others if _words(_described(tool)) & task]
    return fitting + hires or others[:1]


DELEGATE = "delegate"  # the reasoning loop's built-in hiring tool (runs/engine/delegating.py)
_MOST_PARTS = 8
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")
_PART_BREAK = re.compile(r"\s*(?:[;\n]|(?<=[.!?])\s+)\s*")


def _hires(
    function: dict[str, Any], messages: list[dict[str, Any]], given: dict[str, Any]
) -> list[dict[str, Any]]:
    """The delegate calls of an agent that hires: one per distinct part of its task (at
    least one), each of the template whose name and description share most words with
    the part (else the templates in turn), with a role named after the template."""
    properties = (function.get("parameters") or {}).get("properties") or {}
    names = [str(n) for n in (properties.get("template") or {}).get("enum") or []]
    if not names:
        return []
    parts, context = _parts(messages, given)
    described = str(function.get("description") or "")
    hires = []
    for number, part in enumerate(parts):
        words = _words(part)
        score = [len(words & _words(f"{n} {_template_text(described, n)}")) for n in names]
        best = max(score)
        name = names[score.index(best)] if best else names[number % len(names)]
        role = name.replace("_", " ").replace("-", " ").strip().capitalize() or "Specialist"
        task = part if not context or context == part else f"{part} (for: {context})"
        hires.append(
            {
                "template": name,
                "role": role[:200],
                "task": task[:4000],
                "reason": f"part {number + 1} of {len(parts)} of the task: {part}"[:1000],
            }
        )
    return hires


def _template_text(description: str, name: str) -> str:
    """What the delegate tool's description says of template `name` ("name: text; ...")."""
    at = description.find(f"{name}: ")
    if at < 0:
        return ""
    rest = description[at + len(name) + 2 :]
    return rest.split("; ", 1)[0]


def _parts(messages: list[dict[str, Any]], given: dict[str, Any]) -> tuple[list[str], str]:
    """The distinct parts of the task, and the text they are parts of: a list of texts in
    the input, else its longest text (else the request) split into sentences, lines and
    items."""
    texts = [v.strip() for v in given.values() if isinstance(v, str) and v.strip()]
    context = max(texts, key=len) if texts else ""
    for value in given.values():
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            listed = [" ".join(v.split()) for v in value if v.strip()]
            if listed:
                return list(dict.fromkeys(listed))[:_MOST_PARTS], context
    text = context or _request(messages)
    pieces = [_BULLET.sub("", p.strip()).strip() for p in _PART_BREAK.split(text)]
    parts = list(dict.fromkeys(p for p in pieces if _words(p)))[:_MOST_PARTS]
    return parts or [text or "the task"], context


def _request(messages: list[dict[str, Any]]) -> str:
    """The request of the last user message, without the input and state it shows."""
    for message in reversed(messages):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            return content.split("\n\nInput", 1)[0].strip()
    return ""


def _described(tool: dict[str, Any]) -> str:
    function = tool.get("function", tool)
    return f"{function.get('name', '')} {function.get('description') or ''}"


_WORD = re.compile(r"[a-z0-9]+")
# Words every prompt and tool description has, which say nothing of what a tool is for.
_COMMON = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "this",
        "that",
        "from",
        "your",
        "you",
        "are",
        "its",
        "into",
        "call",
        "calls",
        "tool",
        "tools",
        "answer",
        "json",
        "output",
        "input",
        "state",
        "entity",
        "given",
        "return",
        "returns",
        "promises",
        "what",
        "which",
        "when",
        "will",
        "step",
        "think",
        "act",
        "reason",
        "decide",
        "next",
        "action",
        "observe",
        "iteratively",
    ]
)


def _words(text: str) -> set[str]:
    """The words of `text` that can tell what a tool is for: lower case, split on anything
    but letters and digits (`look_up` is `look` and `up`), three letters or more."""
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _COMMON}


def _tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """What the tools returned so far: the content of each tool message, in order."""
    return [
        str(m.get("content") or "")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
    ]


def _given_input(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's input as the prompt shows it (after "Input:"), or nothing."""
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, str):
            continue
        at = content.find("Input:\n")
        if at < 0:
            continue
        try:
            value, _end = json.JSONDecoder().raw_decode(content, at + len("Input:\n"))
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _from_input(parameters: dict[str, Any], arguments: Any, given: dict[str, Any]) -> Any:
    """The synthesised arguments with the input's values where a property has the name of
    an input key and the value is valid for it."""
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(arguments, dict) or not isinstance(properties, dict) or not given:
        return arguments
    taken = dict(arguments)
    for name, schema in properties.items():
        if name in given and _valid(schema, given[name]):
            taken[name] = given[name]
    return taken if _valid(parameters, taken) else arguments


def _valid(schema: Any, value: Any) -> bool:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        return isinstance(schema, dict) and Draft202012Validator(schema).is_valid(value)
    except SchemaError:
        return False


_RESULT_CHARS = 300  # of each tool result an answer quotes


def _results_text(results: list[str]) -> str:
    quoted = [r if len(r) <= _RESULT_CHARS else r[: _RESULT_CHARS - 1] + "…" for r in results]
    return "The tools returned: " + " | ".join(quoted) + "."


def _telling(schema: dict[str, Any], value: Any, results: list[str]) -> Any:
    """The synthesised answer with its free-text properties saying what the tools returned,
    where that stays valid against the schema."""
    properties = schema.get("properties")
    if not isinstance(value, dict) or not isinstance(properties, dict):
        return value
    text = _results_text(results)
    told = dict(value)
    for name, spec in properties.items():
        if not isinstance(spec, dict) or spec.get("type") != "string":
            continue
        if any(key in spec for key in ("enum", "const", "pattern", "format")):
            continue
        most = spec.get("maxLength")
        told[name] = text if not isinstance(most, int) or len(text) <= most else text[:most]
    return told if _valid(schema, told) else value


def _stamp_cost(
    response: ModelResponse, model: str, prompt_tokens: int, completion_tokens: int
) -> None:
    """Put the answer's cost on it, as litellm would compute it from its price map.

    litellm prices every response inside `completion()` (`completion_cost` and its model info
    look-ups: a tenth of an offline call) unless the response already says what it cost. A
    model missing from the map, or priced other than per input and output token, is left for
    litellm to price as before.
    """
    price = litellm.model_cost.get(f"{PROVIDER}/{model}")
    if not isinstance(price, dict):
        return
    per_input = price.get("input_cost_per_token")
    per_output = price.get("output_cost_per_token")
    if not isinstance(per_input, int | float) or not isinstance(per_output, int | float):
        return
    if any(value for key, value in price.items() if _OTHER_PRICE.search(key)):
        return  # tiers, cache reads, per-request fees…: litellm's own arithmetic
    hidden = response._hidden_params
    if isinstance(hidden, dict):  # a copy: the default may be shared between responses
        cost = prompt_tokens * per_input + completion_tokens * per_output
        response._hidden_params = {**hidden, "response_cost": cost}


# Any price in a model's entry but the two per-token ones (zeros and Nones are no price).
_OTHER_PRICE = re.compile(r"^(?!(?:input|output)_cost_per_token$).*(?:cost|price)")


def prompt_token_count(model: str, messages: list[dict[str, Any]]) -> int:
    """`litellm.token_counter(model=model, messages=messages)`, counted for less.

    litellm counts a message as a fixed overhead for its role plus its content's tokens, and
    adds a reply primer to the whole; for messages of a role and a text content this sums the
    same parts, with the per-role overheads looked up once and a system prompt (the same call
    after call) counted once. Any other message shape is counted by litellm itself.
    """
    if litellm.disable_token_counter:
        return 0
    total = _reply_primer(model)
    for message in messages:
        if not isinstance(message, dict) or len(message) != 2:
            return int(litellm.token_counter(model=model, messages=messages))
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            return int(litellm.token_counter(model=model, messages=messages))
        total += _message_overhead(model, role)
        total += _count_repeated(model, content) if role == "system" else _count(model, content)
    return total


@functools.lru_cache(maxsize=64)
def _reply_primer(model: str) -> int:
    return int(litellm.token_counter(model=model, messages=[]))


@functools.lru_cache(maxsize=256)
def _message_overhead(model: str, role: str) -> int:
    empty = [{"role": role, "content": ""}]
    return int(litellm.token_counter(model=model, messages=empty)) - _reply_primer(model)


def _count(model: str, text: str) -> int:
    """What `litellm.token_counter` counts in `text` for `model`."""
    if not text or litellm.disable_token_counter:
        return 0
    return int(litellm.token_counter(model=model, text=text))


def _count_repeated(model: str, text: str) -> int:
    """The count of a text that comes back call after call (a system prompt, a function's name,
    a schema, tools), made once; texts too long to keep are counted each time."""
    if len(text) > _KEPT_TEXT_CHARS:
        return _count(model, text)
    return _count_kept(model, text)


_KEPT_TEXT_CHARS = 64_000  # 512 kept texts hold at most about 32 MB


@functools.lru_cache(maxsize=512)
def _count_kept(model: str, text: str) -> int:
    return _count(model, text)


def _latency_s(latency_ms: Any) -> float:
    return float(latency_ms) / 1000 if isinstance(latency_ms, int | float) and latency_ms > 0 else 0


def _timeout_s(timeout: Any) -> float | None:
    if isinstance(timeout, int | float) and timeout > 0:
        return float(timeout)
    read = getattr(timeout, "read", None)  # an httpx.Timeout
    return float(read) if isinstance(read, int | float) and read > 0 else None


def _wait(model: str, latency_ms: Any, timeout: Any) -> None:
    latency_s = _latency_s(latency_ms)
    if not latency_s:
        return
    limit = _timeout_s(timeout)
    time.sleep(min(latency_s, limit) if limit else latency_s)
    if limit and latency_s > limit:
        raise _timeout_error(model, limit)


def _timeout_error(model: str, limit: float) -> Exception:
    return Timeout(
        message=f"the offline model took longer than the {limit:g} s timeout",
        model=model,
        llm_provider=PROVIDER,
    )


# --- the BIAS content filter's judge ---------------------------------------------------------

# The title of governance.safety.BIAS_VERDICT_SCHEMA (a test keeps the two equal).
BIAS_VERDICT_TITLE = "hierarch_bias_verdict"
_GROUPS = (
    r"(?:women|men|girls|boys|females|males|mothers|immigrants|foreigners|muslims|christians"
    r"|jews|hindus|blacks|whites|asians|hispanics|latinos|mexicans|gays|millennials|boomers"
    r"|(?:old|older|young|younger|disabled)\s+(?:people|workers|employees|candidates|applicants))"
)
_BIASED = (
    re.compile(
        rf"\b{_GROUPS}\s+(?:are|aren['’]t|can['’]t|cannot|should(?:n['’]t)?|make|belong)"
        r"(?:\s+\w+){0,3}?\s+(?:bad|worse|better|good|smart(?:er)?|stupid|weak(?:er)?|lazy"
        r"|emotional|irrational|unfit|incapable|inferior|superior|dangerous|criminals?"
        r"|unreliable|suited|suitable|capable|leaders?|lead|trusted|in\s+the\s+kitchen|at\s+home"
        r"|adaptable|productive)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:only|no)\s+(?:young|younger|old|older|male|female|men|women|native|christian"
        r"|white|black)\s+(?:candidates|applicants|people|workers|need\s+apply)\b"
        r"|\b(?:young|younger|male|female|native)\s+(?:candidates|applicants)\s+only\b",
        re.IGNORECASE,
    ),
)


def bias_judge_answer(
    schema: dict[str, Any], messages: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The offline verdict for the BIAS judge's schema, else None (any other schema).

    A keyword stand-in for a judge, deterministic and documented as such: biased when the
    judged text generalises about a group of people ("women are not good at…", "immigrants
    are criminals") or excludes one ("young candidates only"), otherwise not.
    """
    if schema.get("title") != BIAS_VERDICT_TITLE:
        return None
    text = ""
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            text = message["content"]
    for pattern in _BIASED:
        found = pattern.search(text)
        if found:
            return {
                "biased": True,
                "score": 0.9,
                "rationale": f"generalises about or excludes a group of people: {found.group()!r}",
            }
    return {"biased": False, "score": 0.05, "rationale": "no generalisation about a group found"}


# --- summaries ----------------------------------------------------------------------------------

_SUMMARY_LINE_CHARS = 100  # of each line summarised
_SUMMARY_CHARS = 800  # of the whole summary: summaries of summaries stay this short
_EARLIER = re.compile(r"<earlier>\s*(.*?)\s*</earlier>", re.DOTALL)


def summary_answer(schema: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The offline summary for the summary schema's title, else None (any other schema).

    A stand-in for a summary, deterministic and documented as such: the number of lines
    summarised and the start of each (the material between <earlier> and </earlier> of the
    last user message, else the whole message), cut to a length that stays bounded however
    often a summary is summarised again.
    """
    if schema.get("title") != SUMMARY_TITLE:
        return None
    text = ""
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            text = message["content"]
    found = _EARLIER.search(text)
    lines = [line.strip() for line in (found.group(1) if found else text).splitlines()]
    lines = [line for line in lines if line]
    cut = [
        line if len(line) <= _SUMMARY_LINE_CHARS else line[: _SUMMARY_LINE_CHARS - 1] + "…"
        for line in lines
    ]
    summary = f"{len(lines)} earlier entries. " + " | ".join(cut) if lines else "Nothing earlier."
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[: _SUMMARY_CHARS - 1] + "…"
    return {"summary": summary}
