""" "Try it": a designer runs the entity being designed (a draft too) on sample input, with
sandboxed tools unless they choose real ones; trials stay apart from production runs."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from designer.samples import sample_input
from runs.models import Run, ToolCall
from runs.services import RunRefused, run_try
from tests.factories import EntityFactory, grant
from tests.support.clients import signed_in
from tests.support.designer import url
from tests.support.runs import Driver, io
from tests.support.runs import saver as record_saver
from tools.models import RecordedRow

pytestmark = pytest.mark.django_db


def test_a_sample_follows_the_schema():
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 5},
            "level": {"type": "integer", "minimum": 3},
            "ratio": {"type": "number", "exclusiveMinimum": 0.5},
            "country": {"enum": ["FR", "DE"]},
            "lang": {"type": "string", "default": "en"},
            "tags": {"type": "array"},
            "remote": {"type": "boolean"},
            "email": {"type": "string", "format": "email"},
            "who": {"type": "object", "properties": {"name": {"type": "string"}}},
            "note": {"type": ["string", "null"]},
        },
    }
    assert sample_input(schema) == {
        "title": "Sampl",
        "level": 3,
        "ratio": 1.5,
        "country": "FR",
        "lang": "en",
        "tags": [],
        "remote": False,
        "email": "someone@example.com",
        "who": {"name": "Sample name"},
        "note": "Sample note",
    }
    assert sample_input({"type": "string"}) == {}
    assert sample_input("nonsense") == {}


def test_a_deep_schema_gives_a_bounded_sample():
    schema: dict = {"type": "object", "properties": {}}
    inner = schema
    for _ in range(60):
        inner["properties"]["x"] = {"type": "object", "properties": {}}
        inner = inner["properties"]["x"]
    assert json.dumps(sample_input(schema)).count("{") <= 5


def saver(workspace, name="saver"):
    """A DRAFT action whose one step writes a row: a real effect, unless sandboxed."""
    return record_saver(
        workspace,
        name,
        metadata={"type": "ACTION", "status": "DRAFT", "tags": []},
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"email": {"type": "string"}}}},
            # A sandboxed write saves nothing: no row id.
            "output": {
                "schema": {"type": "object", "properties": {"id": {"type": ["integer", "null"]}}}
            },
        },
    )


def test_a_draft_is_tried_with_its_tools_sandboxed(acme, alice):
    entity = saver(acme)
    assert entity.status == "DRAFT"
    run = Driver().run(entity, {"email": "ada@example.com"}, trial=True, sandbox=True, user=alice)
    assert run.status == "COMPLETED", run.error_message
    assert run.trial and run.sandbox
    assert RecordedRow.objects.count() == 0  # no external effect
    assert ToolCall.objects.get(run=run).metadata["sandbox"] is True


def test_a_trial_with_real_tools_has_their_effect(acme, alice):
    grant(alice, acme, "operator")  # a WRITE tool's real call needs the operator role
    run = Driver().run(saver(acme), {"email": "a@b.co"}, trial=True, user=alice)
    assert run.status == "COMPLETED", run.error_message
    assert RecordedRow.objects.get().data == {"email": "a@b.co"}


def test_a_draft_does_not_run_in_production(acme):
    run = Driver().run(saver(acme), {"email": "a@b.co"})
    assert run.status == "FAILED"
    assert run.error_code == "NOT_ACTIVE"


def test_the_runs_under_a_trial_are_trials_and_run_drafts(acme, alice):
    child = saver(acme, "child_saver")
    parent = EntityFactory(
        workspace=acme,
        name="parent",
        type="SKILL",
        children=[child],
        metadata={"type": "SKILL", "status": "DRAFT", "tags": []},
        io_contract=io({"email": "string"}),
    )
    run = Driver().run(parent, {"email": "a@b.co"}, trial=True, sandbox=True, user=alice)
    assert run.status == "COMPLETED", run.error_message
    below = Run.objects.get(parent=run)
    assert below.trial and below.sandbox and below.status == "COMPLETED"


def test_an_archived_entity_is_not_tried(acme, alice):
    entity = EntityFactory(
        workspace=acme, name="old", metadata={"type": "ACTION", "status": "ARCHIVED", "tags": []}
    )
    run = Driver().run(entity, {}, trial=True, sandbox=True, user=alice)
    assert run.error_code == "NOT_ACTIVE"


def test_designers_and_operators_try_viewers_do_not(acme, alice, bob):
    entity = saver(acme)
    assert run_try(entity=entity, input_data={}, user=alice).trial
    with pytest.raises(RunRefused, match="designer or operator"):
        run_try(entity=entity, input_data={}, user=bob)


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


def test_the_editor_offers_a_sample_to_try(designer, acme):
    entity = saver(acme)
    body = designer.get(url(entity)).content.decode()
    assert 'id="try-form"' in body
    assert 'name="email"' in body and 'value="Sample email"' in body


def test_trying_from_the_editor_starts_a_trial_and_shows_it(designer, acme):
    entity = saver(acme)
    response = designer.post(
        url(entity, "entity_try"), {"email": "ada@example.com"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    run = Run.objects.get()
    assert run.trial and run.sandbox and list(run.input_data) == ["email"]
    body = response.content.decode()
    assert "Tools sandboxed" in body and reverse("runs:detail", args=[run.pk]) in body
    assert 'hx-trigger="load delay:1s"' in body  # it polls while the run is pending
    # Without scripts: back to the editor, the trial shown under its form.
    response = designer.post(url(entity, "entity_try"), {"email": "b@c.d", "live_tools": "on"})
    assert response.status_code == 302
    second = Run.objects.exclude(pk=run.pk).get()
    assert not second.sandbox
    assert response["Location"].endswith(f"?try={second.pk}#try")
    assert "Real tools" in designer.get(response["Location"]).content.decode()


def test_bad_trial_input_is_named_at_its_field(designer, acme):
    entity = saver(acme)
    response = designer.post(url(entity, "entity_try"), {"email": "a\x00b"})
    assert response.status_code == 422
    assert "Null characters are not allowed." in response.content.decode()
    assert not Run.objects.exists()


def test_a_trials_result_is_only_this_entitys(designer, acme, alice):
    entity, other = saver(acme), saver(acme, "other")
    run = run_try(entity=other, input_data={}, user=alice)
    address = reverse(
        "designer:entity_try_result",
        kwargs={"workspace": "acme", "pk": entity.pk, "run": run.pk},
    )
    assert designer.get(address).status_code == 404


def test_trials_stay_apart_from_production_runs(designer, acme, alice):
    run = run_try(entity=saver(acme), input_data={}, user=alice)
    listed = designer.get(reverse("runs:list")).content.decode()
    assert str(run.pk) not in listed
    trials = designer.get(reverse("runs:list"), {"trials": "on"}).content.decode()
    assert str(run.pk) in trials


def test_another_workspace_cannot_try(charlie, acme):
    entity = saver(acme)
    response = signed_in(Client, charlie).post(url(entity, "entity_try"), {})
    assert response.status_code == 404
