"""The review mechanism (seed 000 §3.4.3): checks an entity's output against its success
criteria, in order, stopping at the first that fails.

- REGEX: a search on the output (a string as it is, anything else as JSON text), with RE2
  (`patterns.py`: linear time whatever the pattern);
- SCHEMA: the output against a JSON Schema given as an object or as JSON text;
- LLM_JUDGE: a model call answering {decision, confidence, rationale, risk_flags}; the criterion
  passes when the decision is "approve";
- FUNCTION: a function registered here by name with `@review_function` (never an import path
  from a definition); it answers None when the output passes, else a sentence saying why not.

Failures are data: a failed criterion, a broken validator or a judge that could not answer all
come back as a `ReviewResult`. When the judge's model call itself failed, `error_code` and
`retryable` say so, so the engine can treat it under the retry policy rather than as a verdict.
What to do about a failure (`on_failure`) is the engine's decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import jsonschema
from jsonschema.exceptions import SchemaError

from runs.engine import patterns, schemas
from runs.engine.ports import LLM_ERROR, ModelClient, ModelError, ModelRequest

RequestFactory = Callable[..., ModelRequest]
ReviewFunction = Callable[[Any], str | None]
REVIEW_FUNCTIONS: dict[str, ReviewFunction] = {}

DECISIONS = ("approve", "retry", "escalate")
JUDGE_SCHEMA: dict[str, Any] = {
    "title": "review_judgment",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "decision": {"enum": list(DECISIONS)},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "rationale": {"type": "string"},
        "risk_flags": {"type": "array", "items": {"type": "string"}},
        # Seed 001 §A.3: "human_review" sends the output to a person whatever the decision.
        "route": {"enum": ["auto", "human_review"], "examples": ["auto"]},
    },
    "required": ["decision", "confidence", "rationale", "risk_flags"],
}
JUDGE_SYSTEM_PROMPT = (
    "You review the output of an automated step against a success criterion. Decide: "
    '"approve" when it meets the criterion, "retry" when another attempt could fix it, '
    '"escalate" when a person must look at it. Give your confidence from 0 to 1, a short '
    'rationale, any risk flags, and the route: "human_review" when a person should see it '
    'whatever you decided, else "auto".'
)
DEFAULT_REVIEW_PROMPT = "Review this output against the criterion.\n\nOutput: {output}"

_JUDGE_VALIDATOR = jsonschema.Draft202012Validator(JUDGE_SCHEMA)


@dataclass(frozen=True)
class ReviewResult:
    """The review's verdict.

    `failed_criterion` is the first criterion that failed (as written in the definition),
    `detail` says why in a sentence, `judge` is the last LLM judge's verdict (kept for the
    trace and an approval's explanation), `passed_criteria` names the criteria that passed.
    """

    passed: bool
    failed_criterion: dict[str, Any] | None = None
    detail: str = ""
    judge: dict[str, Any] | None = None
    passed_criteria: tuple[str, ...] = field(default_factory=tuple)
    error_code: str = ""
    retryable: bool = False
    # A judge routed the output to a person (route "human_review", or a confidence under
    # the mechanism's judge_confidence_threshold): the engine opens a request.
    human_review: bool = False
    # Every judge verdict of this review, (criterion, verdict), to keep per attempt.
    verdicts: tuple[tuple[str, dict[str, Any]], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class _Check:
    passed: bool
    detail: str = ""
    judge: dict[str, Any] | None = None
    error_code: str = ""
    retryable: bool = False
    human_review: bool = False


def review_function(name: str) -> Callable[[ReviewFunction], ReviewFunction]:
    """Register a FUNCTION validator under `name`."""

    def register(function: ReviewFunction) -> ReviewFunction:
        REVIEW_FUNCTIONS[name] = function
        return function

    return register


def review(
    output: Any,
    mechanism: Mapping[str, Any] | None,
    *,
    model: ModelClient,
    request_factory: RequestFactory,
) -> ReviewResult:
    """Check `output` against `mechanism` (logic_gate.review_mechanism).

    A disabled review passes. `request_factory(messages=…, response_schema=…, purpose=…)`
    builds the judge's ModelRequest with the entity's model settings.
    """
    mechanism = mechanism or {}
    if not mechanism.get("enabled"):
        return ReviewResult(passed=True, detail="review is disabled")
    prompt = str(mechanism.get("review_prompt") or "") or DEFAULT_REVIEW_PROMPT
    passed: list[str] = []
    judge: dict[str, Any] | None = None
    verdicts: list[tuple[str, dict[str, Any]]] = []
    threshold = mechanism.get("judge_confidence_threshold")
    for criterion in mechanism.get("success_criteria") or []:
        check = _check(output, criterion, prompt, model, request_factory, threshold)
        judge = check.judge or judge
        if check.judge is not None:
            verdicts.append((_name(criterion), check.judge))
        if not check.passed:
            return ReviewResult(
                passed=False,
                failed_criterion=dict(criterion),
                detail=f"{_name(criterion)}: {check.detail}",
                judge=judge,
                passed_criteria=tuple(passed),
                error_code=check.error_code,
                retryable=check.retryable,
                human_review=check.human_review,
                verdicts=tuple(verdicts),
            )
        passed.append(_name(criterion))
    return ReviewResult(
        passed=True, judge=judge, passed_criteria=tuple(passed), verdicts=tuple(verdicts)
    )


def _check(
    output: Any,
    criterion: Mapping[str, Any],
    prompt: str,
    model: ModelClient,
    request_factory: RequestFactory,
    threshold: float | None = None,
) -> _Check:
    kind = criterion.get("validation_type")
    validator = criterion.get("validator")
    if kind == "REGEX":
        return regex_check(output, validator)
    if kind == "SCHEMA":
        return schema_check(output, validator)
    if kind == "LLM_JUDGE":
        return judge_check(output, criterion, prompt, model, request_factory, threshold)
    if kind == "FUNCTION":
        return function_check(output, validator)
    return _Check(
        False, f"unknown validation_type {kind!r}; use REGEX, SCHEMA, LLM_JUDGE or FUNCTION"
    )


def output_text(output: Any) -> str:
    """The output as the text REGEX searches and the judge reads: a string as it is,
    anything else as JSON."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, sort_keys=True, default=str)


def regex_check(output: Any, pattern: Any) -> _Check:
    if not isinstance(pattern, str) or not pattern:
        return _Check(False, "a REGEX criterion needs a pattern (validator)")
    try:
        compiled = patterns.compile_pattern(pattern)
    except patterns.PatternRefused as exc:
        return _Check(False, schemas.refused_pattern_message(pattern, exc.reason))
    if not compiled.search(output_text(output)):
        return _Check(False, f"the output does not match {pattern!r}")
    return _Check(True)


def schema_check(output: Any, schema: Any) -> _Check:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            return _Check(False, f"the schema is not valid JSON ({exc.msg})")
    if not isinstance(schema, dict | bool):
        return _Check(False, "a SCHEMA criterion needs a JSON Schema (validator)")
    try:
        schemas.check_schema(schema)
    except SchemaError as exc:
        return _Check(False, f"the schema is not a valid JSON Schema ({exc.message})")
    errors = sorted(
        schemas.user_validator(schema).iter_errors(output),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    if errors:
        problems = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(output)'}: {e.message}"
            for e in errors
        ]
        return _Check(False, "the output breaks the schema: " + "; ".join(problems))
    return _Check(True)


def judge_check(
    output: Any,
    criterion: Mapping[str, Any],
    prompt: str,
    model: ModelClient,
    request_factory: RequestFactory,
    threshold: float | None = None,
) -> _Check:
    request = request_factory(
        messages=judge_messages(output, criterion, prompt),
        response_schema=JUDGE_SCHEMA,
        purpose="JUDGE",
    )
    try:
        reply = model.complete(request)
    except ModelError as exc:
        return _Check(
            False,
            f"the judge could not answer: {exc}",
            error_code=exc.code,
            retryable=exc.retryable,
        )
    verdict = reply.parsed if reply.parsed is not None else _decode(reply.content)
    problems = _verdict_problems(verdict)
    if problems:
        return _Check(
            False,
            "the judge did not answer with a verdict: " + "; ".join(problems),
            error_code=LLM_ERROR,
            retryable=True,
        )
    verdict = {**verdict, "route": verdict.get("route") or "auto"}
    rationale = verdict["rationale"] or "no rationale given"
    if verdict["route"] == "human_review":
        return _Check(
            False,
            f"the judge routes this to a person ({verdict['decision']}, confidence "
            f"{verdict['confidence']:.2f}): {rationale}",
            verdict,
            human_review=True,
        )
    if threshold is not None and verdict["confidence"] < threshold:
        return _Check(
            False,
            f"the judge's confidence {verdict['confidence']:.2f} is under the threshold "
            f"{threshold:g} ({verdict['decision']}): {rationale}",
            verdict,
            human_review=True,
        )
    if verdict["decision"] != "approve":
        return _Check(False, f"the judge decided {verdict['decision']}: {rationale}", verdict)
    return _Check(True, judge=verdict)


def judge_messages(
    output: Any, criterion: Mapping[str, Any], prompt: str
) -> tuple[dict[str, Any], ...]:
    """The judge's conversation: the review prompt with {output} filled (by replacement, so
    braces elsewhere in the prompt or the output are harmless), the criterion and, when the
    criterion has one, its validator text as guidance."""
    body = prompt.replace("{output}", output_text(output))
    if "{output}" not in prompt:
        body += f"\n\nOutput: {output_text(output)}"
    lines = [f"Criterion: {_name(criterion)}"]
    guidance = criterion.get("validator")
    if isinstance(guidance, str) and guidance:
        lines.append(f"How to judge: {guidance}")
    return (
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": "\n".join(lines) + "\n\n" + body},
    )


def _decode(content: str) -> Any:
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return None


def _verdict_problems(verdict: Any) -> list[str]:
    if not isinstance(verdict, dict):
        return ["the answer is not a JSON object"]
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(verdict)'}: {e.message}"
        for e in _JUDGE_VALIDATOR.iter_errors(verdict)
    ]


def function_check(output: Any, name: Any) -> _Check:
    function = REVIEW_FUNCTIONS.get(name) if isinstance(name, str) else None
    if function is None:
        known = ", ".join(sorted(REVIEW_FUNCTIONS)) or "none"
        return _Check(False, f"no review function is registered as {name!r} (registered: {known})")
    try:
        problem = function(output)
    except Exception as exc:  # a bug in one check must fail the review, not the worker
        return _Check(False, f"the review function {name!r} failed: {type(exc).__name__}: {exc}")
    return _Check(problem is None, problem or "")


def _name(criterion: Mapping[str, Any]) -> str:
    return str(criterion.get("criterion") or criterion.get("validation_type") or "criterion")


# -- registered review functions ---------------------------------------------------------------

VIDEO_EXTENSIONS = (".mp4", ".mov", ".webm", ".mkv", ".avi", ".m4v", ".mpeg", ".mpg")
_VIDEO_FIELDS = ("video_url", "video_file", "video_path", "file_url", "url")
_DURATION_FIELDS = ("duration_seconds", "video_duration_seconds", "duration_s", "duration")
VIDEO_DURATION_S = (20.0, 40.0)


@review_function("validate_video_file")
def validate_video_file(output: Any) -> str | None:
    """The output names a video file: a `video_url` (or video_file, video_path, file_url, url)
    that is an http(s) URL with a host or a file path, whose extension, if it has one, is a
    video format; a `file_size_bytes` present must be positive, a `mime_type` video/*.

    The engine does no I/O, so "exists" means "is named well"; a tool step checks the bytes.
    """
    if not isinstance(output, Mapping):
        return "the output is not an object with a video_url"
    field_name = next((f for f in _VIDEO_FIELDS if output.get(f)), None)
    if field_name is None:
        return "the output has no video_url (nor video_file, video_path, file_url, url)"
    location = output[field_name]
    if not isinstance(location, str) or not location.strip():
        return f"{field_name} must be text naming the video, not {location!r}"
    problem = _video_location_problem(field_name, location.strip())
    if problem:
        return problem
    size = output.get("file_size_bytes")
    if size is not None and (not _is_number(size) or size <= 0):
        return f"file_size_bytes is {size!r}; a video file has a positive size"
    mime = output.get("mime_type")
    if mime is not None and not str(mime).startswith("video/"):
        return f"mime_type is {mime!r}, not a video type"
    return None


def _video_location_problem(field_name: str, location: str) -> str | None:
    parsed = urlparse(location)
    if parsed.scheme in ("http", "https"):
        if not parsed.netloc:
            return f"{field_name} {location!r} has no host"
        path = parsed.path
    elif parsed.scheme in ("", "file") and not location.startswith(("javascript:", "data:")):
        path = parsed.path or location
    else:
        return f"{field_name} {location!r} is neither an http(s) URL nor a file path"
    name = path.rsplit("/", 1)[-1]
    if "." in name:
        extension = "." + name.rsplit(".", 1)[-1].lower()
        if extension not in VIDEO_EXTENSIONS:
            known = ", ".join(VIDEO_EXTENSIONS)
            return f"{field_name} {location!r} is not a video file ({extension}; expected {known})"
    return None


@review_function("check_video_duration")
def check_video_duration(output: Any) -> str | None:
    """The output's `duration_seconds` (or video_duration_seconds, duration_s, duration) is a
    number from 20 to 40 seconds, inclusive."""
    low, high = VIDEO_DURATION_S
    if not isinstance(output, Mapping):
        return "the output is not an object with a duration_seconds"
    field_name = next((f for f in _DURATION_FIELDS if f in output), None)
    if field_name is None:
        return "the output has no duration_seconds"
    duration = output[field_name]
    if not _is_number(duration):
        return f"{field_name} is {duration!r}, not a number of seconds"
    if not low <= duration <= high:
        return f"the video lasts {duration:g} s; it must last {low:g} to {high:g} s"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
