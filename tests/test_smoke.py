"""The embedded default end to end: demo setup, the admin, deploy checks."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from entities.models import Entity, Workspace

pytestmark = pytest.mark.smoke

ROOT = Path(__file__).resolve().parent.parent


def test_it_sets_up_the_demo_idempotently(db):
    out = StringIO()
    call_command("setup_demo", stdout=out)
    assert "login: admin / admin" in out.getvalue()
    demo = Workspace.objects.get(slug="demo")
    names = set(Entity.objects.filter(workspace=demo).values_list("name", flat=True))
    assert {
        "video_ad_creation_process",
        "content_analyst_agent",
        "information_extraction_skill",
        "nlp_parsing_action",
    } <= names

    again = StringIO()
    call_command("setup_demo", stdout=again)
    assert "(0 created or updated)" in again.getvalue()
    assert Entity.objects.filter(workspace=demo).count() == len(names)


def test_the_demo_process_has_four_levels(db):
    call_command("setup_demo", stdout=StringIO())
    depths = dict(Entity.objects.values_list("name", "composition_depth"))
    assert depths["video_ad_creation_process"] == 0
    assert depths["content_analyst_agent"] == 1
    assert depths["information_extraction_skill"] == 2
    assert depths["nlp_parsing_action"] == 3
    assert Entity.objects.get(name="nlp_parsing_action").is_atomic


def test_it_passes_the_deploy_checks_with_debug_off():
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SECURE_") and not key.endswith("_COOKIE_SECURE")
    }
    env.update(
        DEBUG="0",
        SECRET_KEY="a-long-random-production-key-" + "q7Zp2Lm9Xc4Vb8Nw" * 3,
        ALLOWED_HOSTS="hierarch.example.com",
    )
    result = subprocess.run(  # noqa: S603
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_demo_asks_a_person_before_it_posts_an_announcement(db):
    from approvals.models import Approval
    from approvals.services import approval_decide
    from governance.permissions import membership_grant
    from tests.factories import UserFactory
    from tests.support.queued_runs import Driver
    from tools.models import RecordedRow

    call_command("setup_demo", stdout=StringIO())
    demo = Workspace.objects.get(slug="demo")
    announce = Entity.objects.get(workspace=demo, name="announce_release")
    message = {"message": "Hierarch ships the approvals inbox.", "channel": "#releases"}
    driver = Driver()
    run = driver.run(announce, message)
    assert run.status == "PAUSED"
    request = Approval.objects.get(run=run)
    assert request.payload == {"table": "announcements", "data": message}
    assert not RecordedRow.objects.exists()

    approver = UserFactory(username="pat")
    membership_grant(workspace=demo, user=approver, role="approver")
    approval_decide(approval=request, user=approver, decision="approve")
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert run.status == "COMPLETED", run.error_message
    assert RecordedRow.objects.get().data == message


def test_the_demos_research_assistant_looks_things_up_before_it_answers(db):
    from runs.models import LLMCall, ToolCall
    from tests.support.queued_runs import Driver

    call_command("setup_demo", stdout=StringIO())
    demo = Workspace.objects.get(slug="demo")
    assistant = Entity.objects.get(workspace=demo, name="research_assistant")
    question = "What does the knowledge base say about hiring senior engineers, and the salary?"
    run = Driver().run(assistant, {"question": question})

    assert run.status == "COMPLETED", run.error_message
    tools = list(ToolCall.objects.filter(run=run).values_list("tool_id", "success"))
    assert sorted(tools) == [("knowledge_search", True), ("market_statistics", True)]
    assert LLMCall.objects.filter(run=run).count() == 2  # it asked for them, then answered
    assert run.output_data["answer"].startswith("The tools returned:")


def test_the_demos_coordinator_hires_a_specialist_per_deliverable_and_combines_their_work(db):
    from runs.models import LLMCall, Run
    from runs.selectors import trace_tree
    from tests.support.queued_runs import Driver

    call_command("setup_demo", stdout=StringIO())
    demo = Workspace.objects.get(slug="demo")
    coordinator = Entity.objects.get(workspace=demo, name="launch_coordinator")
    brief = {
        "brief": "Hierarch 1.0: design, run and govern hierarchical AI agents",
        "deliverables": ["Write the headline", "Write the body copy", "Write a social post"],
    }
    run = Driver().run(coordinator, brief)

    assert run.status == "COMPLETED", run.error_message
    hired = Run.objects.filter(parent=run).order_by("group_index")
    assert [(h.entity.name, h.role, h.status) for h in hired] == [
        ("headline_writer", "Headline writer", "COMPLETED"),
        ("copywriter", "Copywriter", "COMPLETED"),
        ("social_post_writer", "Social post writer", "COMPLETED"),
    ]
    assert LLMCall.objects.filter(run=run).count() == 2  # it hired, then answered
    announcement = run.output_data["announcement"]
    for subordinate in hired:  # their work, combined
        assert next(iter(subordinate.output_data.values())) in announcement
    run.refresh_from_db()
    assert run.budget_usd is not None and run.total_cost_usd <= run.budget_usd
    nodes = [child["node"] for child in trace_tree(run)["trace_tree"]["children"]]
    assert [node["budget_usd"] for node in nodes] == [0.05, 0.05, 0.05]
    assert all(node["role"] and node["task"] and node["hired_reason"] for node in nodes)
