"""The runs page: what each person sees, the filters and their errors, the pages, the live
refresh, the start form generated from an entity's input schema, cancel and re-run."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import Run, RunStatus
from runs.services import run_advance, run_start
from runs.store import latest_version
from runs.views.listing import run_url
from tests.factories import EntityFactory, UserFactory, grant

pytestmark = pytest.mark.smoke

LIST = reverse("runs:list")
RESULTS = reverse("runs:results")
START = reverse("runs:start")
HTMX = {"HX-Request": "true"}


def a_run(entity, status=RunStatus.COMPLETED, *, ago: timedelta | None = None, **fields):
    """A root run of the entity's current version in any status (no executor involved)."""
    run_id = fields.pop("id", None) or uuid.uuid4()
    run = Run.objects.create(
        id=run_id,
        trace_id=fields.pop("trace_id", run_id),
        workspace_id=entity.workspace_id,
        entity=entity,
        entity_version=latest_version(entity),
        status=status,
        **fields,
    )
    if ago is not None:
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - ago)
        run.refresh_from_db()
    return run


def row_ids(response) -> list[str]:
    return re.findall(r'<tr id="run-([0-9a-f-]{36})"', response.content.decode())


def field_error(response, field: str) -> str:
    """The text of a field's errors: the filters' `<div id="id_<field>_error">`, or the
    `<ul … id="id_<field>_error">` Django renders in a field group."""
    page = response.content.decode()
    match = re.search(rf'<div id="id_{field}_error"[^>]*>(.*?)</div>', page, re.S) or re.search(
        rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', page, re.S
    )
    assert match, f"no error container for {field}"
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


@pytest.fixture
def olga(acme):
    """An operator of Acme."""
    return grant(UserFactory(username="olga"), acme, "operator")


@pytest.fixture
def writer(acme):
    return EntityFactory(workspace=acme, name="writer")


@pytest.fixture
def reviewer(acme):
    return EntityFactory(workspace=acme, name="reviewer")


@pytest.fixture
def mailer(globex):
    return EntityFactory(workspace=globex, name="mailer")


# -- the list ----------------------------------------------------------------------------------


class TestList:
    def test_it_lists_the_runs_of_the_users_workspaces_newest_first(
        self, client, bob, writer, reviewer, mailer
    ):
        older = a_run(writer, ago=timedelta(hours=2))
        newer = a_run(reviewer, RunStatus.RUNNING, ago=timedelta(minutes=5))
        a_run(mailer)
        client.force_login(bob)
        response = client.get(LIST)
        assert response.status_code == 200
        assert row_ids(response) == [str(newer.pk), str(older.pk)]
        assert "mailer" not in response.content.decode()

    def test_a_superuser_sees_every_workspace(self, client, root, writer, mailer):
        runs = [a_run(writer, ago=timedelta(minutes=2)), a_run(mailer)]
        client.force_login(root)
        assert row_ids(client.get(LIST)) == [str(runs[1].pk), str(runs[0].pk)]

    def test_it_shows_root_runs_unless_child_runs_are_asked_for(self, client, bob, writer):
        parent = a_run(writer, ago=timedelta(minutes=1))
        child = a_run(writer, parent=parent, root=parent, trace_id=parent.trace_id)
        client.force_login(bob)
        assert row_ids(client.get(LIST)) == [str(parent.pk)]
        with_children = client.get(LIST, {"children": "on"})
        assert row_ids(with_children) == [str(child.pk), str(parent.pk)]
        assert "child run" in with_children.content.decode()

    def test_a_row_shows_status_duration_cost_tokens_and_who_started_it(
        self, client, bob, olga, writer
    ):
        started = timezone.now() - timedelta(seconds=90)
        run = a_run(
            writer,
            RunStatus.FAILED,
            created_by=olga,
            started_at=started,
            completed_at=started + timedelta(milliseconds=2500),
            execution_time_ms=2500,
            total_cost_usd=Decimal("0.001250"),
            total_tokens=1234,
            error_code="INVALID_INPUT",
        )
        client.force_login(bob)
        page = client.get(LIST).content.decode()
        row = page[page.index(f'id="run-{run.pk}"') :]
        row = row[: row.index("</tr>")]
        assert 'class="run-status run-status-failed">Failed<' in row
        assert "2.5 s" in row
        assert "$0.00125" in row
        assert "1,234" in row
        assert "olga" in row
        assert "INVALID_INPUT" in row
        assert f'href="{run_url(run)}"' in row
        assert "acme" in row.lower()

    def test_each_row_links_to_the_runs_trace_page(self, client, bob, writer):
        run = a_run(writer)
        client.force_login(bob)
        assert f'href="{run_url(run)}"' in client.get(LIST).content.decode()
        assert str(run.pk) in run_url(run)

    def test_what_a_model_wrote_in_an_error_is_shown_as_text(self, client, bob, writer):
        a_run(writer, RunStatus.FAILED, error_code="X", error_message='"><script>alert(1)</script>')
        client.force_login(bob)
        page = client.get(LIST).content.decode()
        assert "<script>alert(1)" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page

    def test_it_sends_anonymous_visitors_to_sign_in(self, client, writer):
        for url in (LIST, RESULTS, START):
            response = client.get(url)
            assert response.status_code == 302
            assert response["Location"].startswith(reverse("admin:login"))

    def test_an_empty_list_says_so(self, client, bob, olga):
        client.force_login(bob)
        assert "No run yet." in client.get(LIST).content.decode()


# -- filters -----------------------------------------------------------------------------------


class TestFilters:
    @pytest.fixture
    def runs(self, writer, reviewer, mailer):
        return {
            "failed": a_run(writer, RunStatus.FAILED, ago=timedelta(minutes=10)),
            "running": a_run(reviewer, RunStatus.RUNNING, ago=timedelta(minutes=20)),
            "paused": a_run(writer, RunStatus.PAUSED, ago=timedelta(hours=3)),
            "old": a_run(reviewer, RunStatus.COMPLETED, ago=timedelta(days=3)),
            "ancient": a_run(writer, RunStatus.COMPLETED, ago=timedelta(days=30)),
            "globex": a_run(mailer, RunStatus.FAILED),
        }

    def ids(self, runs, *names) -> list[str]:
        return [str(runs[name].pk) for name in names]

    def test_status_takes_several_values(self, client, bob, runs):
        client.force_login(bob)
        response = client.get(LIST, {"status": ["FAILED", "RUNNING"]})
        assert row_ids(response) == self.ids(runs, "failed", "running")
        page = response.content.decode()
        assert re.search(r'value="FAILED"[^>]*checked', page)
        assert not re.search(r'value="PAUSED"[^>]*checked', page)

    def test_entity_and_workspace_narrow_the_list(self, client, root, runs, writer, globex):
        client.force_login(root)
        assert row_ids(client.get(LIST, {"entity": str(writer.pk)})) == self.ids(
            runs, "failed", "paused", "ancient"
        )
        assert row_ids(client.get(LIST, {"workspace": globex.slug})) == self.ids(runs, "globex")

    def test_periods_count_back_from_now(self, client, bob, runs):
        client.force_login(bob)
        assert row_ids(client.get(LIST, {"period": "1h"})) == self.ids(runs, "failed", "running")
        assert row_ids(client.get(LIST, {"period": "24h"})) == self.ids(
            runs, "failed", "running", "paused"
        )
        assert row_ids(client.get(LIST, {"period": "7d"})) == self.ids(
            runs, "failed", "running", "paused", "old"
        )

    def test_a_custom_period_takes_a_start_an_end_or_both(self, client, bob, runs):
        client.force_login(bob)
        local = timezone.localtime
        start = (local() - timedelta(days=5)).strftime("%Y-%m-%dT%H:%M")
        end = (local() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        both = client.get(LIST, {"period": "custom", "start": start, "end": end})
        assert row_ids(both) == self.ids(runs, "paused", "old")
        # Dates alone mean "between" too.
        assert row_ids(client.get(LIST, {"end": end})) == self.ids(runs, "paused", "old", "ancient")

    def test_the_filters_fetch_the_results_alone_and_put_them_in_the_address_bar(
        self, client, bob, runs, writer
    ):
        client.force_login(bob)
        response = client.get(
            RESULTS, {"status": ["FAILED", "PAUSED"], "entity": str(writer.pk)}, headers=HTMX
        )
        assert response.status_code == 200
        page = response.content.decode()
        assert "<h1>" not in page
        assert row_ids(response) == self.ids(runs, "failed", "paused")
        assert response["HX-Push-Url"] == (f"{LIST}?status=FAILED&status=PAUSED&entity={writer.pk}")
        # The filter errors are cleared at their fields, outside the results.
        assert 'id="id_status_error" class="filter-error" hx-swap-oob="true"' in page

    def test_the_lists_own_refresh_leaves_the_address_bar_alone(self, client, bob, runs):
        client.force_login(bob)
        headers = {**HTMX, "HX-Trigger": "runs-results"}
        response = client.get(RESULTS, {"status": "RUNNING"}, headers=headers)
        assert row_ids(response) == self.ids(runs, "running")
        assert "HX-Push-Url" not in response

    def test_an_unknown_status_is_an_error_at_the_field_and_lists_nothing(self, client, bob, runs):
        client.force_login(bob)
        response = client.get(LIST, {"status": ["FAILED", "DONE"]})
        assert response.status_code == 422
        assert row_ids(response) == []
        assert "DONE is not a run status" in field_error(response, "status")
        assert "The filters above have a problem." in response.content.decode()

    def test_another_workspaces_entity_is_an_error_not_a_peek(self, client, bob, runs, mailer):
        client.force_login(bob)
        response = client.get(LIST, {"entity": str(mailer.pk)})
        assert response.status_code == 422
        refused = field_error(response, "entity")
        assert "There is no entity with this id among the ones you can see." in refused
        assert "mailer" not in response.content.decode()
        # By name: another workspace's entity is not found either (nor said to exist).
        missing = client.get(LIST, {"entity": "mailer", "workspace": "globex"})
        assert "No entity is named “mailer” among the ones you can see" in field_error(
            missing, "entity"
        )
        assert "No such workspace" in field_error(missing, "workspace")

    def test_bad_dates_are_errors_at_their_fields(self, client, bob, runs):
        client.force_login(bob)
        garbled = client.get(LIST, {"start": "yesterday"})
        assert garbled.status_code == 422
        assert "YYYY-MM-DDTHH:MM" in field_error(garbled, "start")
        backwards = client.get(
            LIST, {"period": "custom", "start": "2025-02-01T10:00", "end": "2025-01-01T10:00"}
        )
        assert "The end is before the start." in field_error(backwards, "end")
        mixed = client.get(LIST, {"period": "1h", "start": "2025-02-01T10:00"})
        assert "Choose “Between…”" in field_error(mixed, "period")
        empty = client.get(LIST, {"period": "custom"})
        assert "Give a start, an end or both" in field_error(empty, "start")
        assert client.get(LIST, {"period": "fortnight"}).status_code == 422

    def test_errors_reach_their_fields_when_the_filters_fetch_the_results(self, client, bob, runs):
        client.force_login(bob)
        response = client.get(RESULTS, {"status": "DONE"}, headers=HTMX)
        assert response.status_code == 422
        page = response.content.decode()
        assert re.search(r'<div id="id_status_error" [^>]*hx-swap-oob="true"', page)
        assert "DONE is not a run status" in field_error(response, "status")
        assert row_ids(response) == []


class TestPagesAndRefresh:
    def test_it_shows_twenty_five_runs_a_page_with_links_to_the_others(self, client, bob, writer):
        runs = [a_run(writer, ago=timedelta(minutes=n)) for n in range(30)]
        client.force_login(bob)
        first = client.get(LIST)
        assert row_ids(first) == [str(r.pk) for r in runs[:25]]
        assert "Page 1" in first.content.decode()
        assert "Newer" not in first.content.decode()
        assert f'href="{LIST}?page=2"' in first.content.decode()
        second = client.get(RESULTS, {"page": "2"}, headers=HTMX)
        assert row_ids(second) == [str(r.pk) for r in runs[25:]]
        assert second["HX-Push-Url"] == f"{LIST}?page=2"
        assert f'href="{LIST}"' in second.content.decode()  # back to the newest
        assert "Older" not in second.content.decode()
        # A page past the end says so; a page that is not a number is the first.
        past = client.get(LIST, {"page": "9"})
        assert row_ids(past) == []
        assert "No run on page 9." in past.content.decode()
        assert row_ids(client.get(LIST, {"page": "x"})) == row_ids(first)
        assert row_ids(client.get(LIST, {"page": "-3"})) == row_ids(first)

    def test_the_pages_keep_the_filters(self, client, bob, writer):
        for n in range(27):
            a_run(writer, RunStatus.FAILED, ago=timedelta(minutes=n))
        client.force_login(bob)
        page = client.get(LIST, {"status": "FAILED"}).content.decode()
        assert "?status=FAILED&amp;page=2" in page

    def test_the_results_refresh_every_two_seconds_while_a_shown_run_is_going(
        self, client, bob, writer
    ):
        a_run(writer, RunStatus.COMPLETED)
        a_run(writer, RunStatus.RUNNING)
        client.force_login(bob)
        page = client.get(LIST, {"status": ["RUNNING", "COMPLETED"]}).content.decode()
        assert 'hx-trigger="every 2s' in page
        assert f'hx-get="{RESULTS}?status=RUNNING&amp;status=COMPLETED"' in page

    def test_runs_paused_on_a_person_refresh_less_often(self, client, bob, writer):
        a_run(writer, RunStatus.PAUSED)
        client.force_login(bob)
        assert 'hx-trigger="every 10s' in client.get(LIST).content.decode()

    def test_a_page_of_ended_runs_does_not_refresh(self, client, bob, writer):
        a_run(writer, RunStatus.COMPLETED)
        a_run(writer, RunStatus.CANCELLED)
        client.force_login(bob)
        assert "every " not in client.get(LIST).content.decode()


# -- who sees the buttons ----------------------------------------------------------------------


class TestButtons:
    def test_an_operator_sees_start_cancel_and_rerun(self, client, olga, writer):
        going = a_run(writer, RunStatus.RUNNING)
        done = a_run(writer, RunStatus.COMPLETED)
        client.force_login(olga)
        page = client.get(LIST).content.decode()
        assert f'href="{START}"' in page
        assert reverse("runs:cancel", args=[going.pk]) in page
        assert reverse("runs:cancel", args=[done.pk]) not in page  # an ended run
        assert reverse("runs:rerun", args=[done.pk]) in page

    def test_a_viewer_sees_no_buttons(self, client, bob, writer):
        run = a_run(writer, RunStatus.RUNNING)
        client.force_login(bob)
        page = client.get(LIST).content.decode()
        assert row_ids(client.get(LIST)) == [str(run.pk)]
        assert reverse("runs:cancel", args=[run.pk]) not in page
        assert reverse("runs:rerun", args=[run.pk]) not in page
        assert f'href="{START}"' not in page

    def test_an_operator_of_one_workspace_gets_buttons_only_there(
        self, client, acme, globex, writer, mailer
    ):
        mixed = grant(UserFactory(username="mixed"), acme, "operator")
        grant(mixed, globex, "viewer")
        ours, theirs = a_run(writer, RunStatus.RUNNING), a_run(mailer, RunStatus.RUNNING)
        client.force_login(mixed)
        page = client.get(LIST).content.decode()
        assert reverse("runs:cancel", args=[ours.pk]) in page
        assert reverse("runs:cancel", args=[theirs.pk]) not in page


# -- start -------------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "company_name": {"type": "string", "title": "Company", "minLength": 2},
        "job_description": {
            "type": "string",
            "description": "The <b>whole</b> posting",
            "minLength": 20,
        },
        "seconds": {
            "type": "integer",
            "minimum": 15,
            "maximum": 60,
            "default": 30,
            "x-order": 1,
        },
        "budget": {"type": "number"},
        "subtitles": {"type": "boolean", "default": True},
        "tone": {"type": "string", "enum": ["friendly", "formal"], "default": "friendly"},
        "priority": {"enum": [1, 2, 3]},
        "channels": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["company_name", "job_description", "channels"],
}
JOB = "We are seeking an engineer to build and own distributed systems."


@pytest.fixture
def video(acme):
    return EntityFactory(
        workspace=acme,
        name="video_ad",
        io_contract={
            "input": {
                "schema": SCHEMA,
                "validation_rules": [
                    {
                        "rule": "company_name must be at most 30 characters",
                        "validator": "length_validator",
                    }
                ],
            }
        },
    )


def start_url(entity) -> str:
    return reverse("runs:start_entity", args=[entity.pk])


def typed(**overrides) -> dict:
    data = {
        "company_name": "TechCorp",
        "job_description": JOB,
        "seconds": "45",
        "budget": "2.5",
        "subtitles": "on",
        "tone": '"formal"',
        "priority": "2",
        "channels": '["youtube", "tiktok"]',
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


class TestChooseAnEntity:
    def test_it_lists_the_active_entities_where_the_user_operates(
        self, client, olga, acme, writer, video, mailer
    ):
        EntityFactory(workspace=acme, name="drafty", metadata={"type": "ACTION", "status": "DRAFT"})
        client.force_login(olga)
        page = client.get(START).content.decode()
        assert start_url(writer) in page
        assert start_url(video) in page
        assert "drafty" not in page
        assert "mailer" not in page

    def test_the_search_narrows_the_entities(self, client, olga, writer, video):
        client.force_login(olga)
        response = client.get(
            START, {"q": "VIDEO"}, headers={**HTMX, "HX-Target": "start-entities"}
        )
        page = response.content.decode()
        assert page.lstrip().startswith('<section id="start-entities"')
        assert start_url(video) in page
        assert start_url(writer) not in page
        assert (
            "No active entity matches “nothing”"
            in client.get(START, {"q": "nothing"}).content.decode()
        )

    def test_a_viewer_is_told_the_operator_role_is_needed(self, client, bob, writer):
        client.force_login(bob)
        page = client.get(START).content.decode()
        assert "the operator role is needed" in page
        assert start_url(writer) not in page


class TestStartForm:
    def test_the_form_has_a_field_of_the_right_kind_for_each_property(self, client, olga, video):
        client.force_login(olga)
        response = client.get(start_url(video))
        assert response.status_code == 200
        page = response.content.decode()
        assert re.search(r'<input type="text" name="company_name"[^>]*required', page)
        assert re.search(r'<label for="id_company_name" class="required">Company', page)
        assert re.search(r'<textarea name="job_description"[^>]*required', page)
        assert "The &lt;b&gt;whole&lt;/b&gt; posting" in page  # a description, as text
        assert re.search(r'<input type="number" name="seconds" value="30"[^>]*max="60"', page)
        assert re.search(r'<input type="number" name="budget"[^>]*step="any"', page)
        assert re.search(r'<input type="checkbox" name="subtitles"[^>]*checked', page)
        assert re.search(r'<option value="&quot;friendly&quot;" selected>friendly</option>', page)
        assert '<option value="2">2</option>' in page
        # A list of texts: one per line.
        assert re.search(r'<textarea name="channels"[^>]*class="lines-editor"', page)
        assert re.search(r'<label for="id_channels" class="required">', page)
        assert "One per line." in page
        assert 'id="input-schema"' in page
        assert "Start the run" in page

    def test_the_fields_keep_an_order_the_database_cannot_shuffle(self, client, olga, video):
        client.force_login(olga)
        page = client.get(start_url(video)).content.decode()
        names = re.findall(r'<(?:input|textarea|select) [^>]*name="(\w+)"', page)
        assert [name for name in names if name != "csrfmiddlewaretoken"] == [
            "seconds",  # x-order
            "company_name",  # then the required ones, as `required` lists them
            "job_description",
            "channels",
            "budget",  # then the others by name
            "priority",
            "subtitles",
            "tone",
        ]
        assert re.search(r'<label for="id_job_description" class="required">Job description<', page)

    def test_a_valid_input_starts_a_run_and_goes_to_its_page(self, client, olga, video):
        client.force_login(olga)
        response = client.post(start_url(video), typed(), headers=HTMX)
        assert response.status_code == 200
        run = Run.objects.get(entity=video)
        assert response["HX-Redirect"] == run_url(run)
        assert run.input_data == {
            "company_name": "TechCorp",
            "job_description": JOB,
            "seconds": 45,
            "budget": 2.5,
            "subtitles": True,
            "tone": "formal",
            "priority": 2,
            "channels": ["youtube", "tiktok"],
        }
        assert run.created_by == olga
        assert run.parent_id is None

    def test_without_javascript_the_form_redirects(self, client, olga, video):
        client.force_login(olga)
        response = client.post(
            start_url(video), typed(budget="", priority="", subtitles=None, tone='"friendly"')
        )
        run = Run.objects.get(entity=video)
        assert response.status_code == 302
        assert response["Location"] == run_url(run)
        # Optional fields left empty are left out; an unticked box is false.
        assert run.input_data == {
            "company_name": "TechCorp",
            "job_description": JOB,
            "seconds": 45,
            "subtitles": False,
            "tone": "friendly",
            "channels": ["youtube", "tiktok"],
        }

    def test_a_list_of_texts_is_typed_one_per_line(self, client, olga, video):
        client.force_login(olga)
        lines = "youtube\r\n\r\n  tiktok  \r\n"
        response = client.post(start_url(video), typed(channels=lines))
        assert response.status_code == 302
        assert Run.objects.get(entity=video).input_data["channels"] == ["youtube", "tiktok"]
        blank = client.post(start_url(video), typed(channels=" \n "), headers=HTMX)
        assert "This field is required." in field_error(blank, "channels")
        assert Run.objects.count() == 1

    def test_input_that_breaks_the_schema_comes_back_at_its_fields_and_starts_nothing(
        self, client, olga, video
    ):
        client.force_login(olga)
        response = client.post(
            start_url(video),
            typed(job_description="too short", seconds="90", channels="[]", priority="7"),
            headers=HTMX,
        )
        assert response.status_code == 422
        assert not Run.objects.exists()
        page = response.content.decode()
        assert page.lstrip().startswith('<section id="start-form"')
        assert "&#x27;too short&#x27; is too short" in field_error(response, "job_description")
        assert "Ensure this value is less than or equal to 60." in field_error(response, "seconds")
        assert "Select a valid choice" in field_error(response, "priority")
        # What the user typed stays.
        assert ">\ntoo short</textarea>" in page
        assert 'value="90"' in page

        schema_only = client.post(start_url(video), typed(channels="[]"), headers=HTMX)
        assert schema_only.status_code == 422
        assert "[] should be non-empty" in field_error(schema_only, "channels")
        assert not Run.objects.exists()

    def test_missing_required_values_and_bad_json_are_named(self, client, olga, video):
        client.force_login(olga)
        response = client.post(
            start_url(video), typed(company_name="", channels='["youtube",'), headers=HTMX
        )
        assert response.status_code == 422
        assert "This field is required." in field_error(response, "company_name")
        assert "This is not valid JSON" in field_error(response, "channels")
        wrong_items = client.post(start_url(video), typed(channels="[1]"), headers=HTMX)
        assert "0: 1 is not of type &#x27;string&#x27;" in field_error(wrong_items, "channels")
        assert not Run.objects.exists()

    def test_the_entitys_validation_rules_are_checked_at_their_field(self, client, olga, video):
        client.force_login(olga)
        response = client.post(start_url(video), typed(company_name="T" * 31), headers=HTMX)
        assert response.status_code == 422
        assert "company_name must be at most 30 characters (it has 31)" in field_error(
            response, "company_name"
        )
        assert not Run.objects.exists()

    def test_a_schema_a_form_cannot_follow_takes_the_input_as_json(self, client, olga, acme):
        entity = EntityFactory(
            workspace=acme,
            name="either",
            io_contract={
                "input": {
                    "schema": {
                        "type": "object",
                        "oneOf": [{"required": ["url"]}, {"required": ["text"]}],
                        "properties": {"url": {"type": "string"}, "text": {"type": "string"}},
                    }
                }
            },
        )
        client.force_login(olga)
        page = client.get(start_url(entity)).content.decode()
        assert re.search(r'<textarea name="input_json"[^>]*class="json-editor"', page)
        assert 'name="url"' not in page
        bad = client.post(start_url(entity), {"input_json": '{"url": 1}'}, headers=HTMX)
        assert bad.status_code == 422
        assert "url: 1 is not of type" in field_error(bad, "input_json")
        not_json = client.post(start_url(entity), {"input_json": "{url"}, headers=HTMX)
        assert "This is not valid JSON" in field_error(not_json, "input_json")
        a_list = client.post(start_url(entity), {"input_json": "[1]"}, headers=HTMX)
        assert "The input must be a JSON object" in field_error(a_list, "input_json")
        assert not Run.objects.exists()
        good = client.post(start_url(entity), {"input_json": '{"text": "hi"}'}, headers=HTMX)
        assert good.status_code == 200
        assert Run.objects.get(entity=entity).input_data == {"text": "hi"}

    def test_an_entity_without_input_properties_takes_json_with_an_empty_object(
        self, client, olga, writer
    ):
        client.force_login(olga)
        page = client.get(start_url(writer)).content.decode()
        assert re.search(r'<textarea name="input_json"[^>]*>\n\{\}</textarea>', page)
        response = client.post(start_url(writer), {"input_json": "{}"})
        assert response.status_code == 302
        assert Run.objects.get(entity=writer).input_data == {}

    def test_a_viewer_cannot_start_a_run(self, client, bob, video):
        client.force_login(bob)
        page = client.get(start_url(video))
        assert page.status_code == 403
        assert "bob may not start runs in Acme; the operator role is needed" in (
            page.content.decode()
        )
        assert "Start the run" not in page.content.decode()
        posted = client.post(start_url(video), typed())
        assert posted.status_code == 403
        assert "the operator role is needed" in posted.content.decode()
        assert not Run.objects.exists()

    def test_another_workspaces_entity_is_not_found(self, client, olga, charlie, mailer):
        client.force_login(olga)
        assert client.get(start_url(mailer)).status_code == 404
        assert client.post(start_url(mailer), {"input_json": "{}"}).status_code == 404
        assert client.get(reverse("runs:start_entity", args=[uuid.uuid4()])).status_code == 404
        assert not Run.objects.exists()

    def test_an_inactive_entity_says_why_it_cannot_run(self, client, olga, acme):
        drafty = EntityFactory(
            workspace=acme, name="drafty", metadata={"type": "ACTION", "status": "DRAFT"}
        )
        client.force_login(olga)
        page = client.get(start_url(drafty)).content.decode()
        assert "drafty is draft: only active entities run." in page
        assert "Start the run" not in page
        response = client.post(start_url(drafty), {"input_json": "{}"}, headers=HTMX)
        assert response.status_code == 409
        assert not Run.objects.exists()

    def test_a_quota_refusal_is_shown_on_the_form(self, client, olga, acme, video):
        acme.user_monthly_run_quota = 1
        acme.save(update_fields=["user_monthly_run_quota"])
        a_run(video, created_by=olga)
        client.force_login(olga)
        response = client.post(start_url(video), typed(), headers=HTMX)
        assert response.status_code == 409
        assert "olga has started 1 runs in Acme this month, its quota of 1 runs" in (
            response.content.decode()
        )
        assert 'value="TechCorp"' in response.content.decode()
        assert Run.objects.count() == 1


# -- cancel and re-run -------------------------------------------------------------------------


class TestCancelAndRerun:
    def test_cancel_asks_the_run_to_stop_and_answers_with_its_row(self, client, olga, writer):
        run = run_start(entity=writer, input_data={}, user=olga)
        client.force_login(olga)
        response = client.post(reverse("runs:cancel", args=[run.pk]), headers=HTMX)
        assert response.status_code == 200
        assert row_ids(response) == [str(run.pk)]
        assert "cancelling…" in response.content.decode()
        assert Run.objects.get(pk=run.pk).cancel_requested
        assert reverse("runs:cancel", args=[run.pk]) not in response.content.decode()

        run_advance(str(run.pk))  # what the executor does next
        assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
        again = client.post(reverse("runs:cancel", args=[run.pk]), headers=HTMX)
        assert again.status_code == 409
        assert row_ids(again) == [str(run.pk)]
        page = again.content.decode()
        assert 'class="row-error" role="alert"' in page
        assert (
            "the run is cancelled already; only a run that has not ended can be cancelled" in page
        )

    def test_cancelling_a_finished_run_without_javascript_says_why_on_the_list(
        self, client, olga, writer
    ):
        run = a_run(writer, RunStatus.COMPLETED)
        client.force_login(olga)
        response = client.post(reverse("runs:cancel", args=[run.pk]), {"next": LIST}, follow=True)
        assert response.redirect_chain == [(LIST, 302)]
        assert "writer: the run is completed already" in response.content.decode()
        assert not Run.objects.get(pk=run.pk).cancel_requested

    def test_a_form_posted_without_a_safe_next_goes_to_the_runs_page(self, client, olga, writer):
        run = a_run(writer, RunStatus.RUNNING)
        client.force_login(olga)
        response = client.post(
            reverse("runs:cancel", args=[run.pk]), {"next": "https://evil.example/"}
        )
        assert response.status_code == 302
        assert response["Location"] == run_url(run)
        assert Run.objects.get(pk=run.pk).cancel_requested
        rerun = client.post(reverse("runs:rerun", args=[run.pk]))
        assert rerun["Location"] == run_url(Run.objects.exclude(pk=run.pk).get())

    def test_rerun_starts_a_new_run_with_the_same_input(self, client, olga, video):
        first = run_start(
            entity=video,
            input_data={"company_name": "TechCorp", "job_description": JOB, "channels": ["x"]},
            user=olga,
        )
        client.force_login(olga)
        response = client.post(reverse("runs:rerun", args=[first.pk]), headers=HTMX)
        assert response.status_code == 200
        second = Run.objects.exclude(pk=first.pk).get()
        assert response["HX-Redirect"] == run_url(second)
        assert second.input_data == first.input_data
        assert second.entity == video
        assert second.created_by == olga
        assert second.status == RunStatus.PENDING

    def test_a_refused_rerun_is_said_in_the_row(self, client, olga, acme, writer):
        run = a_run(writer, created_by=olga)
        acme.user_monthly_run_quota = 1
        acme.save(update_fields=["user_monthly_run_quota"])
        client.force_login(olga)
        response = client.post(reverse("runs:rerun", args=[run.pk]), headers=HTMX)
        assert response.status_code == 409
        assert row_ids(response) == [str(run.pk)]
        assert "its quota of 1 runs per person" in response.content.decode()
        assert Run.objects.count() == 1

    def test_a_viewer_may_neither_cancel_nor_rerun(self, client, bob, writer):
        run = a_run(writer, RunStatus.RUNNING)
        client.force_login(bob)
        assert client.post(reverse("runs:cancel", args=[run.pk]), headers=HTMX).status_code == 403
        assert client.post(reverse("runs:rerun", args=[run.pk]), headers=HTMX).status_code == 403
        assert not Run.objects.get(pk=run.pk).cancel_requested
        assert Run.objects.count() == 1

    def test_another_workspaces_run_is_not_found(self, client, olga, mailer):
        run = a_run(mailer, RunStatus.RUNNING)
        client.force_login(olga)
        assert client.post(reverse("runs:cancel", args=[run.pk])).status_code == 404
        assert client.post(reverse("runs:rerun", args=[run.pk])).status_code == 404
        assert not Run.objects.get(pk=run.pk).cancel_requested
        assert Run.objects.count() == 1

    def test_cancel_and_rerun_take_only_posts(self, client, olga, writer):
        run = a_run(writer, RunStatus.RUNNING)
        client.force_login(olga)
        assert client.get(reverse("runs:cancel", args=[run.pk])).status_code == 405
        assert client.get(reverse("runs:rerun", args=[run.pk])).status_code == 405
