"""`manage.py run_entity` as a person runs it beside `make run`: in its own process, against
the same database. It ends cleanly (the work it handed to its threads is done before it
exits), and the link it prints is the server's (HIERARCH_BASE_URL, or the address `make run`
keeps in var/base_url)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from approvals.models import Approval
from runs.models import Run
from tests.factories import EntityFactory
from tests.support.database import database_url

ROOT = Path(__file__).resolve().parents[2]

RENDER = {
    "tool_id": "render",
    "name": "Render",
    "implementation": "template_render",
    "function_schema": {
        "name": "render",
        "parameters": {
            "type": "object",
            "properties": {"template": {"type": "string"}},
            "required": ["template"],
        },
    },
}


def careful(workspace):
    """An entity that thinks (a model call, slow with HIERARCH_OFFLINE_LATENCY_MS), then waits
    on a person before its tool call (and so notifies)."""
    think = {
        "step_id": "s1",
        "order": 1,
        "name": "Think",
        "type": "THOUGHT",
        "target": {},
        "description": "Think: answer briefly.",
    }
    render = {
        "step_id": "s2",
        "order": 2,
        "name": "Render",
        "type": "TOOL_CALL",
        "target": {"tool_id": "render"},
        "input_mapping": {"template": "hello"},
    }
    return EntityFactory(
        workspace=workspace,
        name="careful",
        tools=[RENDER],
        planning={"static_plan": {"enabled": True, "steps": [think, render]}},
        governance={
            "human_oversight": {
                "hitl_checkpoints": [
                    {"trigger": "BEFORE_TOOL_CALL", "notification_channels": ["IN_APP", "EMAIL"]}
                ]
            }
        },
    )


def run_entity(*argv: str, var_dir: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {
        k: v for k, v in os.environ.items() if k not in {"HIERARCH_BASE_URL", "DATABASE_URL"}
    }
    return subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "manage.py", "run_entity", "careful", "--workspace", "acme", *argv],
        cwd=ROOT,
        env={
            **environment,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": database_url(),
            "HIERARCH_EXECUTOR": "inline",
            "HIERARCH_VAR_DIR": str(var_dir),  # not the developer's var/
            # The model call is still under way when a command that does not wait returns.
            "HIERARCH_OFFLINE_LATENCY_MS": "1000",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_without_wait_it_prints_the_run_and_ends_cleanly(acme, tmp_path):
    careful(acme)

    result = run_entity(var_dir=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no traceback from a thread pool at exit
    printed = json.loads(result.stdout)
    run = Run.objects.get(pk=printed["run_id"])
    # It worked on the run until it rested: waiting on a person, who has been told.
    assert run.status == "PAUSED"
    assert Approval.objects.filter(run=run, status="PENDING").exists()


@pytest.mark.django_db(transaction=True)
def test_with_wait_the_link_names_the_servers_address(acme, tmp_path):
    careful(acme)

    result = run_entity("--wait", var_dir=tmp_path, HIERARCH_BASE_URL="http://127.0.0.1:8765")

    assert result.returncode == 3, result.stderr  # waits on a person's decision
    assert "waits on a person" in result.stderr and "Traceback" not in result.stderr
    request = Approval.objects.get()
    decide_at = json.loads(result.stdout)["waits_on_a_person"]["decide_at"]
    assert decide_at == f"http://127.0.0.1:8765/approvals/{request.pk}/"


@pytest.mark.django_db(transaction=True)
def test_beside_make_run_the_link_names_the_address_it_keeps(acme, tmp_path):
    careful(acme)
    (tmp_path / "base_url").write_text("http://127.0.0.1:8123\n")  # as `make run PORT=8123`

    result = run_entity("--wait", var_dir=tmp_path)

    assert result.returncode == 3, result.stderr
    request = Approval.objects.get()
    decide_at = json.loads(result.stdout)["waits_on_a_person"]["decide_at"]
    assert decide_at == f"http://127.0.0.1:8123/approvals/{request.pk}/"
