"""A run out of passes in the console and on the command line: the trace page offers the
form that gives it more (to operators; CSRF-checked), and `run_entity --wait` returns with
what to do (exit code 4) instead of waiting for ever."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from runs.models import Run
from tests.factories import UserFactory, grant
from tests.support.loops import out_of_passes, review_loop


@pytest.fixture
def olga(acme):
    return grant(UserFactory(username="olga"), acme, "operator")


def test_the_trace_page_gives_more_passes_and_the_run_goes_on(client, acme, olga):
    run, driver = out_of_passes(acme)
    client.force_login(olga)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "MAX_PASSES_EXHAUSTED" in page
    assert f'action="/runs/{run.pk}/passes/"' in page

    answer = client.post(f"/runs/{run.pk}/passes/", {"passes": "2"})

    assert answer.status_code == 302
    run.refresh_from_db()
    assert (run.status, run.passes_granted) == ("RUNNING", 2)
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert run.status == "COMPLETED", run.error_message
    said = client.get(answer["Location"]).content.decode()
    assert "goes on with more passes" in said


def test_a_bad_number_is_said_and_changes_nothing(client, acme, olga):
    run, _ = out_of_passes(acme)
    client.force_login(olga)
    answer = client.post(f"/runs/{run.pk}/passes/", {"passes": "lots"}, follow=True)
    assert "passes must be a whole number" in answer.content.decode()
    run.refresh_from_db()
    assert (run.status, run.passes_granted) == ("BLOCKED", 0)


def test_a_viewer_sees_no_form_and_may_not_post(client, acme, bob):
    run, _ = out_of_passes(acme)
    client.force_login(bob)
    assert "/passes/" not in client.get(f"/runs/{run.pk}/").content.decode()
    assert client.post(f"/runs/{run.pk}/passes/", {"passes": "1"}).status_code == 403


def test_the_form_needs_the_csrf_token(acme, olga):
    run, _ = out_of_passes(acme)
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(olga)
    assert checked.post(f"/runs/{run.pk}/passes/", {"passes": "1"}).status_code == 403
    run.refresh_from_db()
    assert run.status == "BLOCKED"


@pytest.mark.django_db(transaction=True)
def test_run_entity_wait_returns_when_the_loop_runs_out_with_exit_code_4(acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    review_loop(acme)
    out = StringIO()

    with pytest.raises(CommandError) as stopped:
        call_command("run_entity", "writer", "--workspace", "acme", "--wait", stdout=out)

    assert stopped.value.returncode == 4
    printed = json.loads(out.getvalue())
    (item,) = printed["needs_attention"]
    run = Run.objects.get(entity__name="writer")
    assert item["reason"]["code"] == "MAX_PASSES_EXHAUSTED"
    assert re.fullmatch(rf"/api/v1/runs/{run.pk}/passes", item["action"]["api"]["path"])
