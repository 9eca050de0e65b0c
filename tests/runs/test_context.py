"""Context engineering, memory and artifacts in real runs (offline model through litellm)."""

from __future__ import annotations

import pytest

from runs.models import Artifact, LLMCall, MemoryItem
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io

pytestmark = pytest.mark.smoke


def remembering(acme, name: str, **memory):
    return EntityFactory(
        workspace=acme,
        name=name,
        io_contract=io({"topic": "string"}, note="string"),
        capabilities={"memory": {"enabled": True, **memory}},
    )


def prompt_of(run) -> str:
    return LLMCall.objects.get(run=run).input_prompt


def test_entity_memory_carries_what_earlier_runs_produced(db, acme):
    action = remembering(acme, "diarist", scope="ENTITY", access_pattern="RECENT_N")
    driver = Driver()
    first = driver.run(action, {"topic": "first topic"})
    second = driver.run(action, {"topic": "second topic"})

    assert "Memory:" not in prompt_of(first)
    assert "Memory:" in prompt_of(second)
    assert first.output_data["note"] in prompt_of(second)
    assert MemoryItem.objects.filter(entity=action, scope="ENTITY").count() == 2


def test_memory_keeps_at_most_max_items(db, acme):
    action = remembering(acme, "forgetful", scope="ENTITY", retention_policy={"max_items": 2})
    driver = Driver()
    for topic in ("one", "two", "three"):
        driver.run(action, {"topic": topic})
    topics = [
        item["input"]["topic"] for item in MemoryItem.objects.values_list("content", flat=True)
    ]
    assert sorted(topics) == ["three", "two"]


def test_session_memory_ends_with_its_trace(db, acme):
    action = remembering(acme, "sessional", scope="SESSION")
    run = Driver().run(action, {"topic": "x"})
    assert run.status == "COMPLETED"
    assert not MemoryItem.objects.filter(session=run.trace_id).exists()


def test_global_memory_is_shared_across_entities(db, acme):
    writer = remembering(acme, "writer", scope="GLOBAL")
    reader = remembering(acme, "reader", scope="GLOBAL")
    driver = Driver()
    written = driver.run(writer, {"topic": "shared"})
    read = driver.run(reader, {"topic": "other"})
    assert written.output_data["note"] in prompt_of(read)


def test_a_context_over_its_limit_is_trimmed_and_the_trace_says_so(db, acme):
    action = EntityFactory(
        workspace=acme,
        name="squeezed",
        io_contract=io({"topic": "string"}, note="string"),
        capabilities={
            "context_engineering": {
                "max_context_tokens": 300,
                "context_priority": ["SYSTEM_PROMPT", "USER_INPUT"],
                "artifact_handling": {"artifact_reference_mode": "INLINE"},
            }
        },
    )
    run = Driver().run(action, {"topic": "word " * 2000})
    assert run.status == "COMPLETED"
    call = LLMCall.objects.get(run=run)
    assert call.prompt_tokens < 600
    assert "truncated to fit the context" in call.input_prompt


def test_a_large_input_travels_by_reference_and_is_stored_once(db, acme):
    action = EntityFactory(
        workspace=acme,
        name="referrer",
        io_contract=io({"document": "string"}, note="string"),
        capabilities={
            "context_engineering": {
                "artifact_handling": {
                    "store_large_objects": True,
                    "artifact_reference_mode": "REFERENCE",
                }
            }
        },
    )
    document = "A long resume line. " * 1000  # about 20 KB
    driver = Driver()
    first = driver.run(action, {"document": document})
    driver.run(action, {"document": document})

    prompt = prompt_of(first)
    assert "artifact://sha256/" in prompt
    assert document not in prompt
    assert Artifact.objects.filter(workspace=acme).count() == 1
    assert Artifact.objects.get().content.count("A long resume line.") == 1000
