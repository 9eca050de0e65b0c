"""The entity editor: every section of a definition as fields, checked as one types, saved
whole through the services; problems at their fields, nothing lost.

POST data is what a browser would send for the rendered page (`page_form`)."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from entities.models import Entity, EntityStatus, EntityVersion
from tests.factories import EntityFactory, grant
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(acme):
    return EntityFactory(
        workspace=acme,
        name="writer",
        type="AGENT",
        identity={"name": "writer", "persona": {"system_prompt": "You write scripts."}},
    )


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


def test_it_shows_every_section_filled_in(designer, agent):
    data = shown(designer, url(agent))
    assert data["identity-name"] == "writer"
    assert data["identity-system_prompt"] == "You write scripts."
    assert data["model-model_provider"] == "local"
    assert data["model-model_name"] == "offline"
    assert json.loads(data["document"])["identity"]["name"] == "writer"


def test_it_saves_the_fields_as_a_new_version(designer, agent):
    data = shown(designer, url(agent))
    data |= {
        "identity-display_name": "Script writer",
        "identity-behavioral_constraints": "Be brief\n\n  Never swear  ",
        "identity-tags": "video, hiring, video",
        "model-temperature": "0.2",
        "model-retry_on": ["LLM_ERROR"],
        "op": "save",
    }
    response = designer.post(url(agent), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.display_name == "Script writer"
    assert agent.tags == ["video", "hiring"]
    assert agent.persona["behavioral_constraints"] == ["Be brief", "Never swear"]
    assert agent.logic_gate["reasoning_config"]["temperature"] == 0.2
    assert agent.logic_gate["retry_policy"]["retry_on"] == ["LLM_ERROR"]
    assert EntityVersion.objects.filter(entity=agent).count() == 2
    assert "Saved writer: version" in designer.get(url(agent)).content.decode()


def test_a_field_that_is_not_a_number_is_named_and_nothing_is_lost(designer, agent):
    data = shown(designer, url(agent)) | {
        "model-temperature": "warm",
        "identity-display_name": "Kept",
    }
    response = designer.post(url(agent), data | {"op": "save"})
    assert response.status_code == 422
    page = form_data(response.content, "editor")
    assert page["model-temperature"] == "warm"
    assert page["identity-display_name"] == "Kept"
    assert "Enter a number." in response.content.decode()
    agent.refresh_from_db()
    assert agent.display_name == ""


def test_the_services_problems_are_shown_at_their_fields(designer, agent, acme):
    EntityFactory(workspace=acme, name="taken", type="ACTION")
    data = shown(designer, url(agent)) | {
        "identity-system_prompt": "",
        "identity-description": "",
        "model-temperature": "hot",
    }
    response = designer.post(url(agent), data | {"op": "save"})
    assert response.status_code == 422
    editor = response.context["editor"]
    identity, model = editor.sections[0].form, editor.sections[1].form
    assert "required for an AGENT" in str(identity.errors["system_prompt"]), editor.problems
    assert "required" in str(identity.errors["description"])
    assert model.errors["temperature"] == ["Enter a number."]
    assert editor.general == []
    assert editor.error_count == 3
    # A name another entity has, at its field.
    data = shown(designer, url(agent)) | {"identity-name": "taken"}
    response = designer.post(url(agent), data | {"op": "save"})
    assert "already" in str(response.context["editor"].sections[0].form.errors["name"])
    # A colour that is not one, at its field.
    data = shown(designer, url(agent)) | {"identity-color": "red"}
    response = designer.post(url(agent), data | {"op": "save"})
    assert "hex colour" in str(response.context["editor"].sections[0].form.errors["color"])


def test_the_check_answers_every_fields_problem_in_place(designer, agent):
    data = shown(designer, url(agent)) | {"identity-system_prompt": "", "model-top_p": "7"}
    response = designer.post(url(agent, "entity_check"), data)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="err-identity-system_prompt" hx-swap-oob="true"><li>' in body
    assert 'id="err-model-top_p" hx-swap-oob="true"><li>' in body
    assert 'id="err-identity-name" hx-swap-oob="true"></ul>' in body
    assert "2 problems" in body
    agent.refresh_from_db()
    assert agent.persona["system_prompt"] == "You write scripts."


def test_a_row_is_added_without_saving_and_an_empty_one_is_no_row(designer, agent):
    data = shown(designer, url(agent)) | {"add_row": "identity-examples"}
    response = designer.post(url(agent), data)
    assert response.status_code == 200
    page = form_data(response.content, "editor")
    assert page["identity-examples-TOTAL_FORMS"] == "1"
    assert "identity-examples-0-scenario" in page
    page |= {"identity-examples-0-scenario": "A nurse job", "op": "save"}
    response = designer.post(url(agent), page)
    assert response.status_code == 422  # a scenario without its ideal response
    assert "identity-examples-0-ideal_response" in response.content.decode()
    page["identity-examples-0-ideal_response"] = "Warm, clear, 30 s."
    assert designer.post(url(agent), page).status_code == 302
    agent.refresh_from_db()
    assert agent.persona["examples"] == [
        {"scenario": "A nurse job", "ideal_response": "Warm, clear, 30 s."}
    ]
    # An added row left empty is no example.
    page = shown(designer, url(agent)) | {"add_row": "identity-examples"}
    page = form_data(designer.post(url(agent), page).content, "editor") | {"op": "save"}
    assert designer.post(url(agent), page).status_code == 302
    agent.refresh_from_db()
    assert len(agent.persona["examples"]) == 1


def test_a_row_is_removed(designer, agent):
    page = shown(designer, url(agent)) | {"add_row": "identity-examples"}
    page = form_data(designer.post(url(agent), page).content, "editor")
    page |= {"identity-examples-0-scenario": "s", "identity-examples-0-ideal_response": "r"}
    assert designer.post(url(agent), page | {"op": "save"}).status_code == 302
    page = shown(designer, url(agent)) | {"identity-examples-0-DELETE": "on", "op": "save"}
    assert designer.post(url(agent), page).status_code == 302
    agent.refresh_from_db()
    assert agent.persona["examples"] == []


def test_the_json_view_follows_the_fields_and_comes_back_into_them(designer, agent):
    data = shown(designer, url(agent)) | {"identity-display_name": "From the field"}
    response = designer.post(url(agent, "entity_json"), data)
    assert response.status_code == 200
    raw = form_data(b'<form id="f">' + response.content + b"</form>", "f")["raw"]
    document = json.loads(raw)
    assert document["identity"]["display_name"] == "From the field"
    # Edited as JSON, put back into the fields: shown, not saved.
    document["identity"]["description"] = "Written as JSON"
    data |= {"raw": json.dumps(document), "op": "fields"}
    response = designer.post(url(agent), data)
    assert response.status_code == 200
    page = form_data(response.content, "editor")
    assert page["identity-description"] == "Written as JSON"
    assert page["identity-display_name"] == "From the field"
    agent.refresh_from_db()
    assert agent.description != "Written as JSON"
    # Saved from the fields: the JSON's edit is in.
    assert designer.post(url(agent), page | {"op": "save"}).status_code == 302
    agent.refresh_from_db()
    assert agent.description == "Written as JSON"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"identity": {"name": "a\\u0000b"}}', "NUL"),
        ("[" * 5000 + "]" * 5000, "nested deeper"),
        ('{"governance": {"cost_controls": {"max_cost_usd": 1e999}}}', "finite"),
    ],
)
def test_bad_json_is_named_and_the_fields_are_kept(designer, agent, raw, says):
    data = shown(designer, url(agent)) | {"identity-display_name": "Typed", "raw": raw}
    for op in ("fields", "save-raw"):
        response = designer.post(url(agent), data | {"op": op})
        assert response.status_code == 422
        assert says in response.content.decode()
        page = form_data(response.content, "editor")
        assert page["raw"] == raw
    agent.refresh_from_db()
    assert agent.display_name == ""


def test_saving_the_json_as_it_is(designer, agent):
    data = shown(designer, url(agent))
    document = json.loads(data["document"])
    document["identity"]["display_name"] = "Raw"
    response = designer.post(url(agent), data | {"raw": json.dumps(document), "op": "save-raw"})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.display_name == "Raw"


def test_a_nul_in_a_field_is_refused_by_name(designer, agent):
    data = shown(designer, url(agent)) | {"identity-description": "a\x00b"}
    response = designer.post(url(agent), data | {"op": "save"})
    assert response.status_code == 422
    assert "Null characters are not allowed." in response.content.decode()


def test_a_forged_document_is_validated_like_any_definition(designer, agent):
    data = shown(designer, url(agent))
    document = json.loads(data["document"])
    # (The children are the Children section's rows: a part no section edits is forged.)
    document["hierarchy"]["parent_id"] = "nowhere"
    response = designer.post(url(agent), data | {"document": json.dumps(document), "op": "save"})
    assert response.status_code == 422
    assert "nowhere" in response.content.decode()
    assert designer.post(url(agent), data | {"document": "{", "op": "save"}).status_code == 422


def test_a_new_entity_is_created_from_the_fields(designer, acme):
    address = reverse("designer:entity_new", kwargs={"workspace": "acme"}) + "?type=SKILL"
    data = shown(designer, address) | {"identity-name": "summarise", "op": "save"}
    response = designer.post(address, data)
    assert response.status_code == 422
    assert "required" in str(response.context["editor"].sections[0].form.errors["description"])
    data["identity-description"] = "Sums up a text"
    response = designer.post(address, data)
    assert response.status_code == 302
    created = Entity.objects.get(workspace=acme, name="summarise")
    assert created.type == "SKILL"
    assert created.status == EntityStatus.DRAFT
    assert response["Location"] == url(created)


def test_status_moves_through_the_lifecycle(designer, agent):
    agent.refresh_from_db()
    target = "DRAFT" if agent.status == EntityStatus.ACTIVE else "ACTIVE"
    response = designer.post(url(agent, "entity_status"), {"status": target})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.status == target
    response = designer.post(url(agent, "entity_status"), {"status": "FLYING"}, follow=True)
    assert "is not a status" in response.content.decode()


def test_a_viewer_reads_but_does_not_save(bob, agent):
    viewer = signed_in(Client, bob)
    response = viewer.get(url(agent))
    assert response.status_code == 200
    assert b'<fieldset class="plain" disabled>' in response.content
    assert viewer.post(url(agent), {"op": "save"}).status_code == 403
    assert viewer.post(url(agent, "entity_status"), {"status": "DRAFT"}).status_code == 403


def test_another_workspaces_entity_is_not_found(charlie, agent, globex):
    outsider = signed_in(Client, charlie)
    assert outsider.get(url(agent)).status_code == 404
    in_their_workspace = reverse("designer:entity", kwargs={"workspace": "globex", "pk": agent.pk})
    assert outsider.get(in_their_workspace).status_code == 404
    assert outsider.post(url(agent, "entity_check"), {}).status_code == 404


def test_an_entity_is_found_only_under_its_own_workspace(alice, agent, globex):
    grant(alice, globex, "designer")
    wrong = reverse("designer:entity", kwargs={"workspace": "globex", "pk": agent.pk})
    assert signed_in(Client, alice).get(wrong).status_code == 404


def test_posts_need_the_csrf_token(alice, agent):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(url(agent), {"op": "save"}).status_code == 403
    assert client.post(url(agent, "entity_check"), {}).status_code == 403


def test_model_suggestions_offer_the_offline_model_first(designer):
    providers = designer.get(
        reverse("designer:model_suggestions", kwargs={"kind": "providers"})
    ).content.decode()
    assert providers.startswith('<option value="local">')
    assert providers.count("<option") == 50
    found = designer.get(
        reverse("designer:model_suggestions", kwargs={"kind": "providers"}),
        {"model-model_provider": "OPENA"},
    ).content.decode()
    assert '<option value="openai">' in found
    models = designer.get(
        reverse("designer:model_suggestions", kwargs={"kind": "models"}),
        {"model-model_provider": "openai", "model-model_name": "gpt-4o"},
    ).content.decode()
    assert 'value="gpt-4o"' in models
    # Every match contains what was typed; litellm knows more than 50 "gpt" models of
    # openai's, and the list stops at 50.
    values = re.findall(r'<option value="([^"]*)">', models)
    assert values and all("gpt-4o" in value for value in values)
    many = designer.get(
        reverse("designer:model_suggestions", kwargs={"kind": "models"}),
        {"model-model_provider": "openai", "model-model_name": "gpt"},
    ).content.decode()
    assert many.count("<option") == 50
