"""`metadata_extensions.ui_hints`: every field acts or is refused.

`form_layout: "wizard"` lays out the console's start form and the designer's "Try it" a page
per field, then a review, walked here with the test client as a browser without scripts
posts it (and as htmx does); a layout the forms do not have is refused at validation and in
the editor. `is_template` offers "Use as template", which creates a DRAFT copy with a history
of its own, audited. `visibility` other than WORKSPACE is refused as not supported yet."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from entities.definition import DefinitionInvalid
from entities.models import Entity, EntityVersion
from entities.selectors import entity_definition
from entities.services import entities_import, entity_save
from governance.models import AuditAction, AuditRecord
from runs.models import Run
from tests.factories import EntityFactory, UserFactory, definition, grant
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
GO = "wizard-go"
JOB = "We are seeking an engineer to build and own distributed systems, end to end."

SCHEMA = {
    "type": "object",
    "properties": {
        "company_name": {"type": "string", "minLength": 2, "x-order": 1},
        "job_description": {"type": "string", "minLength": 20, "x-order": 2},
        "remote": {"type": "boolean", "default": True, "x-order": 3},
        "tone": {"enum": ["formal", "friendly"], "default": "friendly", "x-order": 4},
    },
    "required": ["company_name", "job_description"],
}


def hints(**values) -> dict:
    return {"ui_hints": {"form_layout": None, "visibility": "WORKSPACE", **values}}


def recruiter(workspace, layout="wizard", schema=SCHEMA, **ui_hints) -> Entity:
    return EntityFactory(
        workspace=workspace,
        name="recruiter",
        io_contract={"input": {"schema": schema}},
        metadata_extensions=hints(form_layout=layout, **ui_hints),
    )


@pytest.fixture
def olive(acme):
    return grant(UserFactory(username="olive"), acme, "operator")


def start_url(entity) -> str:
    return reverse("runs:start_entity", args=[entity.pk])


def shown_names(page: str) -> list[str]:
    """The fields a person sees (not the hidden ones carried along)."""
    tags = re.findall(r"<(?:input|textarea|select)\b[^>]*>", page)
    return [
        re.search(r'name="([^"]+)"', tag).group(1)
        for tag in tags
        if 'name="' in tag
        and 'type="hidden"' not in tag
        and 'name="csrfmiddlewaretoken"' not in tag
        and 'name="live_tools"' not in tag
    ]


def step_of(page: str) -> str:
    return re.search(r'name="wizard-step" value="(\d+)"', page).group(1)


def posted(response, form_id: str, **typed) -> dict:
    """What the page's form sends with `typed` put in its fields."""
    data = form_data(response.content, form_id)
    data.update({name: value for name, value in typed.items() if value is not None})
    for name, value in typed.items():
        if value is None:
            data.pop(name, None)
    return data


# -- form_layout: the wizard ---------------------------------------------------------------------


def test_the_start_form_walks_a_field_a_page_without_javascript(client, olive, acme):
    entity = recruiter(acme)
    client.force_login(olive)

    first = client.get(start_url(entity))
    page = first.content.decode()
    assert shown_names(page) == ["company_name"]
    assert step_of(page) == "1"
    assert "Step 1 of 5" in page
    # The other fields ride along hidden, with their defaults.
    assert re.search(r'<input type="hidden" name="remote" value="True"', page)
    assert re.search(r'<input type="hidden" name="tone" value="&quot;friendly&quot;"', page)

    # A page's own problems keep it shown; the next page's empty field says nothing yet.
    short = client.post(start_url(entity), posted(first, "start-run-form", company_name="A"))
    assert short.status_code == 422
    assert step_of(short.content.decode()) == "1"
    assert "is too short" in short.content.decode()
    assert "This field is required" not in short.content.decode()

    second = client.post(
        start_url(entity), posted(short, "start-run-form", company_name="TechCorp", **{GO: "next"})
    )
    assert second.status_code == 200
    assert shown_names(second.content.decode()) == ["job_description"]
    assert "autofocus" in second.content.decode()

    # Back keeps what was typed on either side, and checks nothing.
    back = client.post(
        start_url(entity), posted(second, "start-run-form", job_description="half", **{GO: "back"})
    )
    assert back.status_code == 200
    assert shown_names(back.content.decode()) == ["company_name"]
    assert 'value="TechCorp"' in back.content.decode()
    assert 'name="job_description" value="half"' in back.content.decode()

    page = client.post(start_url(entity), posted(back, "start-run-form", **{GO: "next"}))
    page = client.post(
        start_url(entity), posted(page, "start-run-form", job_description=JOB, **{GO: "next"})
    )
    assert shown_names(page.content.decode()) == ["remote"]
    page = client.post(start_url(entity), posted(page, "start-run-form", remote=None))
    assert shown_names(page.content.decode()) == ["tone"]
    review = client.post(start_url(entity), posted(page, "start-run-form", tone='"formal"'))

    body = review.content.decode()
    assert step_of(body) == "5" and "Step 5 of 5" in body
    assert shown_names(body) == []
    review_part = body[body.index('class="wizard-review"') :]
    answers = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", review_part))
    assert answers == {
        "Company name": "TechCorp",
        "Job description": JOB,
        "Remote": "No",
        "Tone": "formal",
    }
    assert not Run.objects.exists()

    started = client.post(start_url(entity), posted(review, "start-run-form", **{GO: "finish"}))
    run = Run.objects.get()
    assert started.status_code == 302
    assert run.input_data == {
        "company_name": "TechCorp",
        "job_description": JOB,
        "remote": False,
        "tone": "formal",
    }


def test_the_review_sends_back_to_a_page_and_enter_on_it_starts(client, olive, acme):
    entity = recruiter(acme)
    client.force_login(olive)
    data = {
        "wizard-step": "5",
        "company_name": "TechCorp",
        "job_description": JOB,
        "remote": "True",
        "tone": '"friendly"',
    }
    change = client.post(start_url(entity), {**data, GO: "page-2"})
    assert shown_names(change.content.decode()) == ["job_description"]
    # No page past the one shown: a jump ahead stays where it is.
    ahead = client.post(start_url(entity), {**data, "wizard-step": "1", GO: "page-4"})
    assert step_of(ahead.content.decode()) == "1"

    # The review's Enter (its first button) starts with no button named at all.
    client.post(start_url(entity), data)
    assert Run.objects.get().input_data["remote"] is True


def test_a_finish_with_a_problem_goes_to_its_page(client, olive, acme):
    entity = recruiter(acme)
    client.force_login(olive)
    typed = {"wizard-step": "5", "company_name": "TechCorp", "job_description": "too short"}
    response = client.post(start_url(entity), {**typed, GO: "finish"})
    assert response.status_code == 422
    assert shown_names(response.content.decode()) == ["job_description"]
    assert "is too short" in response.content.decode()
    assert not Run.objects.exists()


def test_with_htmx_each_page_swaps_the_form_and_the_start_redirects(client, olive, acme):
    entity = recruiter(acme)
    client.force_login(olive)
    response = client.post(
        start_url(entity), {"wizard-step": "1", "company_name": "TechCorp"}, headers=HTMX
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<section id="start-form"')
    assert shown_names(page) == ["job_description"]
    typed = {"company_name": "TechCorp", "job_description": JOB, "remote": "True"}
    done = client.post(start_url(entity), {**typed, "wizard-step": "5"}, headers=HTMX)
    run = Run.objects.get()
    assert done["HX-Redirect"] == reverse("runs:detail", args=[run.pk])
    assert run.input_data == {**typed, "remote": True}


def test_a_large_input_is_paged_by_groups_of_fields(client, olive, acme):
    schema = {
        "type": "object",
        "properties": {f"field_{n:02}": {"type": "string"} for n in range(13)},
    }
    entity = recruiter(acme, schema=schema)
    client.force_login(olive)
    page = client.get(start_url(entity)).content.decode()
    assert shown_names(page) == ["field_00", "field_01", "field_02"]
    assert "Step 1 of 6" in page  # five pages of at most three fields, then the review
    assert len(re.findall(r'<input type="hidden" name="field_', page)) == 10


def test_the_single_form_and_a_json_input_stay_one_form(client, olive, acme):
    single = recruiter(acme, layout="single")
    client.force_login(olive)
    page = client.get(start_url(single)).content.decode()
    assert 'name="wizard-step"' not in page
    assert shown_names(page) == ["company_name", "job_description", "remote", "tone"]
    # A wizard cannot page one JSON text: the input is asked in one form.
    free = EntityFactory(
        workspace=acme,
        name="free_form",
        io_contract={"input": {"schema": {"type": "object"}}},
        metadata_extensions=hints(form_layout="wizard"),
    )
    page = client.get(start_url(free)).content.decode()
    assert 'name="wizard-step"' not in page and 'name="input_json"' in page


def test_try_it_is_a_wizard_too_and_works_without_javascript(acme, alice):
    entity = recruiter(acme)
    designer = signed_in(Client, alice)
    editor = designer.get(url(entity))
    page = editor.content.decode()
    try_form = page[page.index('id="try-form"') :]
    assert shown_names(try_form[: try_form.index("</form>")]) == ["company_name"]

    sample = form_data(editor.content, "try-form")
    second = designer.post(url(entity, "entity_try"), {**sample, "live_tools": "on"})
    # Without scripts the next page is a page of its own, the real tools choice kept.
    body = second.content.decode()
    assert second.status_code == 200
    assert "<title>Try recruiter" in body
    assert shown_names(body) == ["job_description"]
    assert re.search(r'name="live_tools" checked', body)

    review = designer.post(
        url(entity, "entity_try"),
        {**form_data(second.content, "try-form"), "job_description": JOB, "wizard-step": "4"},
    )
    assert "Step 5 of 5" in review.content.decode()
    done = designer.post(url(entity, "entity_try"), form_data(review.content, "try-form"))
    run = Run.objects.get()
    assert done.status_code == 302 and done["Location"].endswith(f"?try={run.pk}#try")
    assert run.trial and not run.sandbox and run.input_data["job_description"] == JOB

    # With htmx, a page is the section alone.
    swapped = designer.post(url(entity, "entity_try"), sample, headers=HTMX)
    assert swapped.content.decode().lstrip().startswith('<details class="editor-section try"')


def test_an_unknown_layout_is_refused_naming_the_layouts(acme):
    with pytest.raises(DefinitionInvalid) as refused:
        recruiter(acme, layout="tabs")
    (problem,) = refused.value.problems
    assert problem.path == "metadata_extensions.ui_hints.form_layout"
    assert "'tabs' is not a form layout" in problem.message
    assert "'single'" in problem.message and "'wizard'" in problem.message


def test_the_editor_offers_the_layouts_and_keeps_null_as_null(acme, alice):
    entity = recruiter(acme, layout=None)
    designer = signed_in(Client, alice)
    page = designer.get(url(entity)).content.decode()
    select = re.search(r'<select name="identity-form_layout".*?</select>', page, re.S).group(0)
    assert re.findall(r'<option value="(\w*)"', select) == ["single", "wizard"]
    # Visibility is not offered: only WORKSPACE works.
    assert not re.search(r'name="[^"]*visibility', page) and "PRIVATE" not in page

    fields = shown(designer, url(entity))
    designer.post(url(entity), fields | {"op": "save"})
    hints_now = entity_definition(entity=entity)["metadata_extensions"]["ui_hints"]
    assert hints_now["form_layout"] is None

    designer.post(
        url(entity), fields | {"identity-form_layout": "wizard", "identity-is_template": "on"}
    )
    hints_now = entity_definition(entity=entity)["metadata_extensions"]["ui_hints"]
    assert hints_now == {"form_layout": "wizard", "visibility": "WORKSPACE", "is_template": True}


def test_a_layout_saved_before_the_check_is_shown_and_refused_at_its_field(acme, alice):
    entity = recruiter(acme)
    Entity.objects.filter(pk=entity.pk).update(metadata_extensions=hints(form_layout="tabs"))
    designer = signed_in(Client, alice)
    page = designer.get(url(entity)).content.decode()
    assert '<option value="tabs" selected>tabs (not supported)</option>' in page
    # The console shows it as the single form meanwhile.
    response = designer.post(url(entity), shown(designer, url(entity)) | {"op": "save"})
    assert response.status_code == 422
    errors = re.search(r'id="err-identity-form_layout">(.*?)</ul>', response.content.decode())
    assert "&#x27;tabs&#x27; is not a form layout" in errors.group(1)


# -- visibility ---------------------------------------------------------------------------------


@pytest.mark.parametrize("visibility", ["PRIVATE", "PUBLIC"])
def test_a_visibility_other_than_the_workspace_is_not_supported_yet(acme, visibility):
    with pytest.raises(DefinitionInvalid) as refused:
        entity_save(
            workspace=acme,
            definition=definition("hidden", metadata_extensions=hints(visibility=visibility)),
        )
    (problem,) = refused.value.problems
    assert problem.path == "metadata_extensions.ui_hints.visibility"
    assert problem.message.startswith(f"{visibility} is not supported yet")
    assert "use WORKSPACE" in problem.message


def test_an_import_that_says_private_is_refused_naming_the_definition_and_field(acme):
    bundle = [definition("hidden", metadata_extensions=hints(visibility="PRIVATE"))]
    with pytest.raises(DefinitionInvalid) as refused:
        entities_import(workspace=acme, definitions=bundle)
    assert [str(p) for p in refused.value.problems] == [
        "entities[0] (hidden): metadata_extensions.ui_hints.visibility: PRIVATE is not "
        "supported yet: every entity is visible to all the members of its workspace and to no "
        "one else; use WORKSPACE"
    ]
    assert not Entity.objects.exists()


def test_the_editor_shows_a_stored_private_visibility_as_a_problem(acme, alice):
    entity = recruiter(acme)
    Entity.objects.filter(pk=entity.pk).update(metadata_extensions=hints(visibility="PRIVATE"))
    designer = signed_in(Client, alice)
    response = designer.post(url(entity), shown(designer, url(entity)) | {"op": "save"})
    assert response.status_code == 422
    assert "metadata_extensions.ui_hints.visibility</code>: PRIVATE is not supported yet" in (
        response.content.decode()
    )


# -- is_template: "Use as template" --------------------------------------------------------------


@pytest.fixture
def writer(acme):
    return EntityFactory(workspace=acme, name="writer", type="SKILL")


@pytest.fixture
def studio(acme, writer):
    """A template agent with a child and a static plan invoking it."""
    return EntityFactory(
        workspace=acme,
        name="studio",
        type="AGENT",
        children=[writer],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    {
                        "order": 1,
                        "name": "Write",
                        "type": "CHILD_ENTITY_INVOCATION",
                        "target": {"entity_id": "writer"},
                    }
                ],
            }
        },
        metadata_extensions=hints(is_template=True, form_layout="wizard"),
    )


def clone_url(entity) -> str:
    return url(entity, "entity_clone")


def test_templates_are_listed_above_the_tree_with_use_as_template(acme, alice, bob, studio):
    page = signed_in(Client, alice).get(reverse("designer:tree", args=["acme"])).content.decode()
    listed = re.search(r'<details class="templates".*?</details>', page, re.S).group(0)
    assert "Templates (1)" in listed and "studio" in listed and "writer" not in listed
    assert clone_url(studio) in listed
    # A viewer sees the list, and nothing to create with.
    page = signed_in(Client, bob).get(reverse("designer:tree", args=["acme"])).content.decode()
    assert "Templates (1)" in page and clone_url(studio) not in page
    assert clone_url(studio) in signed_in(Client, alice).get(url(studio)).content.decode()


def test_use_as_template_creates_an_audited_draft_with_its_own_history(acme, alice, studio, writer):
    designer = signed_in(Client, alice)
    page = designer.get(clone_url(studio)).content.decode()
    assert 'name="children" value="LINK"' in page and "checked" in page

    response = designer.post(clone_url(studio), {"name": "studio_two", "children": "LINK"})

    copy = Entity.objects.get(name="studio_two")
    assert response.status_code == 302
    assert response["Location"] == url(copy)
    assert copy.status == "DRAFT" and copy.version == "1.0.0"
    assert list(EntityVersion.objects.filter(entity=copy).values_list("version", "change")) == [
        ("1.0.0", "INITIAL")
    ]
    made = entity_definition(entity=copy)
    assert made["metadata_extensions"]["ui_hints"] == {
        "form_layout": "wizard",
        "visibility": "WORKSPACE",
        "is_template": False,
    }
    assert [link["child_id"] for link in made["hierarchy"]["children"]] == [writer.ref]
    assert made["planning"]["static_plan"]["steps"][0]["target"]["entity_id"] == writer.ref
    assert made["hierarchy"]["parent_id"] is None
    record = AuditRecord.objects.get(action=AuditAction.ENTITY_CREATED, object_id=str(copy.pk))
    assert record.actor == alice
    assert record.after["cloned_from"] == {
        "id": str(studio.pk),
        "name": "studio",
        "version": studio.version,
    }
    # The template is as it was.
    assert Entity.objects.get(pk=studio.pk).version == studio.version
    assert "Created studio_two from the template studio" in designer.get(url(copy)).content.decode()


def test_copying_the_children_too_copies_each_and_points_the_plan_at_the_copies(
    acme, alice, studio, writer
):
    response = signed_in(Client, alice).post(
        clone_url(studio), {"name": "studio_two", "children": "COPY"}
    )
    assert response.status_code == 302
    copy = Entity.objects.get(name="studio_two")
    child = Entity.objects.get(name="studio_two.writer")
    assert child.status == "DRAFT" and child.parent_id == copy.pk and child.type == "SKILL"
    made = entity_definition(entity=copy)
    assert [link["child_id"] for link in made["hierarchy"]["children"]] == [child.ref]
    assert made["planning"]["static_plan"]["steps"][0]["target"]["entity_id"] == child.ref
    assert AuditRecord.objects.get(object_id=str(child.pk)).after["cloned_from"]["name"] == (
        "writer"
    )
    assert list(writer.parent_links.values_list("parent__name", flat=True)) == ["studio"]


def test_a_taken_or_wrong_name_is_said_at_its_field(acme, alice, studio):
    designer = signed_in(Client, alice)
    taken = designer.post(clone_url(studio), {"name": "writer", "children": "LINK"})
    assert taken.status_code == 422
    assert re.search(
        r'id="err-name"><li>.*already named &#x27;writer&#x27;', taken.content.decode()
    )
    wrong = designer.post(clone_url(studio), {"name": "-no", "children": "LINK"})
    assert wrong.status_code == 422
    assert "may contain only letters" in wrong.content.decode()
    too_long = designer.post(clone_url(studio), {"name": "s" * 95, "children": "COPY"})
    assert too_long.status_code == 422
    assert re.search(r'id="err-children"><li>s{95}\.writer: is too long', too_long.content.decode())
    assert Entity.objects.count() == 2


def test_only_templates_and_only_designers(acme, alice, bob, writer, studio, charlie):
    designer = signed_in(Client, alice)
    refused = designer.get(clone_url(writer))
    assert refused.status_code == 409 and "writer is not a template" in refused.content.decode()
    assert designer.post(clone_url(writer), {"name": "again"}).status_code == 409
    assert signed_in(Client, bob).post(clone_url(studio), {"name": "mine"}).status_code == 403
    assert signed_in(Client, charlie).get(clone_url(studio)).status_code == 404
    assert Entity.objects.count() == 2


def test_the_demo_process_is_a_template_whose_copy_validates_with_its_children_copied(
    admin_user,
):
    call_command("setup_demo", stdout=StringIO())
    process = Entity.objects.get(workspace__slug="demo", name="video_ad_creation_process")
    designer = signed_in(Client, admin_user)
    assert 'name="wizard-step"' in designer.get(start_url(process)).content.decode()

    response = designer.post(clone_url(process), {"name": "summer_ads", "children": "COPY"})

    assert response.status_code == 302, response.content.decode()[:3000]
    copy = Entity.objects.get(workspace__slug="demo", name="summer_ads")
    children = [link.child for link in copy.child_links.order_by("order")]
    originals = [link.child for link in process.child_links.order_by("order")]
    assert [child.name for child in children] == [f"summer_ads.{c.name}" for c in originals]
    assert all(child.status == "DRAFT" and child.external_id is None for child in children)
    steps = entity_definition(entity=copy)["planning"]["static_plan"]["steps"]
    invoked = {step["target"]["entity_id"] for step in steps if step["target"]["entity_id"]}
    assert invoked <= {child.ref for child in children}
