"""The review mechanism: REGEX, SCHEMA, LLM_JUDGE and FUNCTION criteria, in order."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import jsonschema
import pytest

from runs.engine import review as reviews
from runs.engine.ports import ModelError, ModelReply, ModelRequest
from runs.engine.review import JUDGE_SCHEMA, REVIEW_FUNCTIONS, review, review_function
from runs.engine.synthesis import synthesize

pytestmark = pytest.mark.smoke

VIDEO = {"video_url": "https://cdn.example.com/ads/senior-engineer.mp4", "duration_seconds": 30}


class FakeJudge:
    """A ModelClient answering each call with the next scripted verdict (or error)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        parsed, content = (
            (None, answer) if isinstance(answer, str) else (answer, json.dumps(answer))
        )
        return ModelReply(content, 10, 5, Decimal("0.001"), 3, "local", "offline", parsed=parsed)

    def count_tokens(self, model: str, text: str) -> int:
        return len(text) // 4


def verdict(decision: str = "approve", rationale: str = "Looks right.") -> dict[str, Any]:
    return {
        "decision": decision,
        "confidence": 0.9,
        "rationale": rationale,
        "risk_flags": [],
        "route": "auto",
    }


def factory(**kwargs: Any) -> ModelRequest:
    return ModelRequest(provider="local", model="offline", temperature=0.0, **kwargs)


def mechanism(*criteria: dict[str, Any], prompt: str = "Check it. Output: {output}") -> dict:
    return {
        "enabled": True,
        "review_prompt": prompt,
        "success_criteria": list(criteria),
        "on_failure": "RETRY",
    }


def criterion(kind: str, validator: Any = None, name: str = "") -> dict[str, Any]:
    item = {"criterion": name or f"{kind} check", "validation_type": kind}
    if validator is not None:
        item["validator"] = validator
    return item


def check(output: Any, *criteria: dict[str, Any], judge: FakeJudge | None = None, **kw: Any):
    return review(
        output, mechanism(*criteria, **kw), model=judge or FakeJudge(), request_factory=factory
    )


def test_a_disabled_review_passes_without_checking() -> None:
    judge = FakeJudge()
    result = review(
        "anything",
        {"enabled": False, "success_criteria": [criterion("LLM_JUDGE")]},
        model=judge,
        request_factory=factory,
    )
    assert result.passed and result.detail == "review is disabled"
    assert judge.requests == []
    assert review("x", None, model=judge, request_factory=factory).passed


def test_an_enabled_review_without_criteria_passes() -> None:
    assert check({"a": 1}).passed


# -- REGEX -------------------------------------------------------------------------------------


def test_regex_searches_an_object_output_as_json_text() -> None:
    result = check(VIDEO, criterion("REGEX", r'"video_url": "https://[^"]+\.mp4"'))
    assert result.passed
    assert result.passed_criteria == ("REGEX check",)


def test_regex_searches_a_string_output_as_it_is() -> None:
    assert check("Contact: ada@example.com", criterion("REGEX", r"[\w.]+@[\w.]+")).passed


def test_regex_fails_when_nothing_matches() -> None:
    result = check("no email here", criterion("REGEX", r"@", name="Has an email"))
    assert not result.passed
    assert result.failed_criterion == criterion("REGEX", r"@", name="Has an email")
    assert result.detail == "Has an email: the output does not match '@'"
    assert result.error_code == ""


@pytest.mark.parametrize(
    ("pattern", "detail"),
    [("(unclosed", "is not a valid regular expression"), (None, "needs a pattern"), ("", "needs")],
)
def test_a_broken_regex_fails_the_criterion_with_a_reason(pattern: Any, detail: str) -> None:
    item = {"criterion": "x", "validation_type": "REGEX", "validator": pattern}
    result = check("text", item)
    assert not result.passed and detail in result.detail


# -- SCHEMA ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "required": ["video_url", "duration_seconds"]},
        '{"required": ["video_url", "duration_seconds"]}',
    ],
)
def test_schema_accepts_an_object_or_json_text(schema: Any) -> None:
    assert check(VIDEO, criterion("SCHEMA", schema)).passed


def test_schema_failure_names_every_problem_with_its_path() -> None:
    schema = {
        "type": "object",
        "required": ["script"],
        "properties": {"duration_seconds": {"type": "number", "maximum": 20}},
    }
    result = check(VIDEO, criterion("SCHEMA", schema, name="Fits"))
    assert not result.passed
    assert result.detail == (
        "Fits: the output breaks the schema: (output): 'script' is a required property; "
        "duration_seconds: 30 is greater than the maximum of 20"
    )


@pytest.mark.parametrize(
    ("schema", "detail"),
    [
        ("{not json", "the schema is not valid JSON"),
        ({"type": "nonsense"}, "the schema is not a valid JSON Schema"),
        (42, "needs a JSON Schema"),
    ],
)
def test_a_broken_schema_fails_the_criterion_with_a_reason(schema: Any, detail: str) -> None:
    result = check(VIDEO, criterion("SCHEMA", schema))
    assert not result.passed and detail in result.detail


# -- LLM_JUDGE ---------------------------------------------------------------------------------


def test_the_judge_approves() -> None:
    judge = FakeJudge(verdict())
    result = check(VIDEO, criterion("LLM_JUDGE", name="Persuasive"), judge=judge)
    assert result.passed
    assert result.judge == verdict()
    (request,) = judge.requests
    assert request.purpose == "JUDGE" and request.response_schema == JUDGE_SCHEMA
    assert request.temperature == 0.0  # the factory's settings
    system, user = request.messages
    assert system["role"] == "system" and "approve" in system["content"]
    assert user["content"].startswith("Criterion: Persuasive\n\nCheck it. Output: {")
    assert '"duration_seconds": 30' in user["content"]


@pytest.mark.parametrize("decision", ["retry", "escalate"])
def test_the_judge_fails_the_output_unless_it_approves(decision: str) -> None:
    judge = FakeJudge(verdict(decision, "The hook is weak."))
    result = check(VIDEO, criterion("LLM_JUDGE", name="Persuasive"), judge=judge)
    assert not result.passed
    assert result.detail == f"Persuasive: the judge decided {decision}: The hook is weak."
    assert result.judge is not None and result.judge["decision"] == decision
    assert result.error_code == ""


def test_the_review_prompt_takes_the_output_by_replacement_so_braces_are_safe() -> None:
    judge = FakeJudge(verdict())
    prompt = 'Answer as {"ok": true}. Output: {output} {unknown}'
    check("a {curly} output", criterion("LLM_JUDGE"), judge=judge, prompt=prompt)
    text = judge.requests[0].messages[1]["content"]
    assert 'Answer as {"ok": true}. Output: a {curly} output {unknown}' in text


def test_a_review_prompt_without_the_placeholder_still_shows_the_output() -> None:
    judge = FakeJudge(verdict())
    check("the output", criterion("LLM_JUDGE"), judge=judge, prompt="Is it good?")
    assert judge.requests[0].messages[1]["content"].endswith("Is it good?\n\nOutput: the output")


def test_the_default_prompt_serves_when_there_is_none() -> None:
    judge = FakeJudge(verdict())
    check("out", criterion("LLM_JUDGE"), judge=judge, prompt="")
    assert "Review this output against the criterion." in judge.requests[0].messages[1]["content"]


def test_a_judge_criterion_validator_is_guidance_for_the_judge() -> None:
    judge = FakeJudge(verdict())
    check("out", criterion("LLM_JUDGE", "Reject anything over 40 words"), judge=judge)
    assert "How to judge: Reject anything over 40 words" in judge.requests[0].messages[1]["content"]


def test_a_judge_answer_in_text_is_decoded() -> None:
    result = check("out", criterion("LLM_JUDGE"), judge=FakeJudge(json.dumps(verdict())))
    assert result.passed


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ("not json", "the answer is not a JSON object"),
        ({"decision": "maybe", "confidence": 2, "rationale": "", "risk_flags": []}, "decision"),
        ({"decision": "approve"}, "'confidence' is a required property"),
    ],
)
def test_a_judge_that_answers_no_verdict_is_a_retryable_llm_error(answer: Any, detail: str) -> None:
    result = check("out", criterion("LLM_JUDGE"), judge=FakeJudge(answer))
    assert not result.passed
    assert (result.error_code, result.retryable) == ("LLM_ERROR", True)
    assert "the judge did not answer with a verdict" in result.detail and detail in result.detail


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (ModelError("rate limited", retryable=True), True),
        (ModelError("bad request", retryable=False), False),
        (ModelError("too slow", code="TIMEOUT"), True),
    ],
)
def test_a_judge_call_that_fails_says_so_for_the_retry_policy(
    error: ModelError, retryable: bool
) -> None:
    result = check("out", criterion("LLM_JUDGE", name="Good"), judge=FakeJudge(error))
    assert not result.passed
    assert (result.error_code, result.retryable) == (error.code, retryable)
    assert result.detail == f"Good: the judge could not answer: {error}"


def test_every_offline_judge_answer_is_a_verdict() -> None:
    for seed in map(str, range(20)):
        answer = synthesize(JUDGE_SCHEMA, seed=seed)
        jsonschema.validate(answer, JUDGE_SCHEMA)
        # The offline judge never sends a demo run to a person on its own.
        assert answer.get("route", "auto") == "auto"


# -- FUNCTION ----------------------------------------------------------------------------------


@pytest.fixture
def registered():
    """Functions registered for one test, removed after it."""
    before = dict(REVIEW_FUNCTIONS)
    yield
    REVIEW_FUNCTIONS.clear()
    REVIEW_FUNCTIONS.update(before)


def test_a_registered_function_decides(registered: None) -> None:
    @review_function("has_script")
    def has_script(output: Any) -> str | None:
        return None if output.get("script") else "the output has no script"

    assert check({"script": "Hi"}, criterion("FUNCTION", "has_script")).passed
    result = check({}, criterion("FUNCTION", "has_script", name="Scripted"))
    assert not result.passed and result.detail == "Scripted: the output has no script"


def test_an_unknown_function_fails_with_the_registered_names() -> None:
    result = check(VIDEO, criterion("FUNCTION", "os.system"))
    assert not result.passed
    assert "no review function is registered as 'os.system'" in result.detail
    assert "check_video_duration, validate_video_file" in result.detail


def test_a_function_that_raises_fails_the_criterion_not_the_worker(registered: None) -> None:
    @review_function("broken")
    def broken(output: Any) -> str | None:
        raise KeyError("video")

    result = check(VIDEO, criterion("FUNCTION", "broken"))
    assert not result.passed
    assert "the review function 'broken' failed: KeyError: 'video'" in result.detail


def test_an_unknown_validation_type_fails_the_criterion() -> None:
    result = check(VIDEO, {"criterion": "x", "validation_type": "VIBES"})
    assert not result.passed and "unknown validation_type 'VIBES'" in result.detail


# -- order -------------------------------------------------------------------------------------


def test_criteria_run_in_order_and_stop_at_the_first_failure() -> None:
    judge = FakeJudge()  # a judge call would fail: no answers scripted
    result = check(
        VIDEO,
        criterion("REGEX", "mp4", name="one"),
        criterion("FUNCTION", "check_video_duration", name="two"),
        criterion("SCHEMA", {"required": ["script"]}, name="three"),
        criterion("LLM_JUDGE", name="four"),
        judge=judge,
    )
    assert not result.passed
    assert result.failed_criterion is not None and result.failed_criterion["criterion"] == "three"
    assert result.passed_criteria == ("one", "two")
    assert judge.requests == []


def test_every_criterion_passing_passes_and_keeps_the_judges_verdict() -> None:
    result = check(
        VIDEO,
        criterion("LLM_JUDGE", name="judged"),
        criterion("FUNCTION", "validate_video_file", name="file"),
        judge=FakeJudge(verdict()),
    )
    assert result.passed and result.judge == verdict()
    assert result.passed_criteria == ("judged", "file")


# -- the demo's functions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    [
        VIDEO,
        {"video_url": "https://example.invalid/videos/abc"},  # a stream link, no extension
        {"video_file": "/media/ads/final.MOV"},
        {"video_path": "renders/ad.webm", "file_size_bytes": 1024, "mime_type": "video/webm"},
        {"url": "file:///tmp/ad.mp4"},
    ],
)
def test_validate_video_file_accepts_a_named_video(output: dict[str, Any]) -> None:
    assert reviews.validate_video_file(output) is None


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        ({}, "has no video_url"),
        ({"video_url": ""}, "has no video_url"),
        ("https://x/a.mp4", "is not an object"),
        ({"video_url": 42}, "must be text naming the video"),
        ({"video_url": "https://cdn/x/thumb.png"}, "is not a video file (.png; expected .mp4"),
        ({"video_url": "https:///a.mp4"}, "has no host"),
        ({"video_url": "javascript:alert(1)"}, "neither an http(s) URL nor a file path"),
        ({"video_url": "ftp://host/a.mp4"}, "neither an http(s) URL nor a file path"),
        ({"video_url": "a.mp4", "file_size_bytes": 0}, "a video file has a positive size"),
        ({"video_url": "a.mp4", "mime_type": "image/png"}, "not a video type"),
    ],
)
def test_validate_video_file_names_what_is_wrong(output: Any, problem: str) -> None:
    found = reviews.validate_video_file(output)
    assert found is not None and problem in found


@pytest.mark.parametrize("seconds", [20, 30, 40, 20.0, 39.5])
def test_check_video_duration_accepts_20_to_40_seconds(seconds: float) -> None:
    assert reviews.check_video_duration({"duration_seconds": seconds}) is None


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        ({"duration_seconds": 19.9}, "the video lasts 19.9 s; it must last 20 to 40 s"),
        ({"duration_seconds": 45}, "the video lasts 45 s; it must last 20 to 40 s"),
        ({"duration_seconds": "30"}, "duration_seconds is '30', not a number of seconds"),
        ({"duration_seconds": True}, "not a number of seconds"),
        ({"video_url": "a.mp4"}, "the output has no duration_seconds"),
        ([30], "is not an object"),
    ],
)
def test_check_video_duration_names_what_is_wrong(output: Any, problem: str) -> None:
    found = reviews.check_video_duration(output)
    assert found is not None and problem in found


def test_check_video_duration_reads_other_duration_fields() -> None:
    assert reviews.check_video_duration({"duration": 25}) is None


def test_the_demo_criteria_pass_a_good_video_and_fail_a_long_one() -> None:
    demo = [
        criterion("FUNCTION", "validate_video_file", name="Video file exists and is valid"),
        criterion("FUNCTION", "check_video_duration", name="Video duration is between 20-40 s"),
    ]
    assert check(VIDEO, *demo).passed
    result = check({**VIDEO, "duration_seconds": 60}, *demo)
    assert not result.passed
    assert result.detail.startswith("Video duration is between 20-40 s: the video lasts 60 s")
