"""The live trace in a real browser, with the real engine: a run waits on a person before it
starts; its trace page shows the paused root; once the request is approved the tree fills in
without a reload (an agent, then its two actions), each status following along. Opening the
action whose model (a fake OpenAI-compatible server on loopback, called through litellm)
answered with an XSS payload shows the answer as text, and the payload never runs."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from approvals.models import Approval
from approvals.services import approval_decide
from runs.models import LLMCall, Run, RunStatus
from runs.services import run_start
from tests.factories import EntityFactory
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<img src=x onerror=window.__xss=1>"
LIVE_MS = 15_000  # a machine busy with other suites runs the engine slower


@pytest.fixture
def fake_model(monkeypatch):
    """A fake OpenAI-compatible server, named in the environment before the console server
    starts (it inherits the environment; its sweeper may take a step of the run too)."""
    server = FakeOpenAIServer().start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
    yield server
    server.stop()


def campaign(workspace):
    """campaign (PROCESS, asks a person before it starts) → writer (AGENT) → draft (ACTION,
    the offline model) and quote (ACTION, an OpenAI-compatible model)."""
    text = {"output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}
    answer = {
        "output": {
            "schema": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            }
        }
    }
    draft = EntityFactory(workspace=workspace, name="draft", io_contract=text)
    quote = EntityFactory(
        workspace=workspace,
        name="quote",
        io_contract=answer,
        logic_gate={"reasoning_config": {"model_provider": "openai", "model_name": "gpt-4o-mini"}},
    )
    writer = EntityFactory(
        workspace=workspace, name="writer", type="AGENT", children=[draft, quote]
    )
    return EntityFactory(
        workspace=workspace,
        name="campaign",
        type="PROCESS",
        children=[writer],
        governance={
            "human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_EXECUTION"}]},
            "execution_limits": {"max_recursion_depth": 5},
        },
    )


def wait_for(predicate, what: str, seconds: float = 15):
    deadline = time.monotonic() + seconds
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds} s for {what}")
        time.sleep(0.05)


def test_the_tree_fills_in_live_and_a_models_xss_answer_is_shown_as_text(
    fake_model, console_page, alice, dave, acme, failures, settings
):
    from playwright.sync_api import expect

    import runs.gateway  # noqa: F401 - litellm's import takes seconds: not inside a step

    # The run executes in this process (the inline executor); slow its offline model calls
    # a little so the page sees the tree grow.
    settings.HIERARCH_OFFLINE_MODEL = {**settings.HIERARCH_OFFLINE_MODEL, "LATENCY_MS": 300}
    for _ in range(3):
        fake_model.reply_json({"answer": XSS})
    process = campaign(acme)
    with transaction.atomic():
        run = run_start(entity=process, input_data={})
    approval = wait_for(
        lambda: Approval.objects.filter(run=run).first(), "the BEFORE_EXECUTION request"
    )

    page = console_page
    page.goto(f"/admin/login/?next=/runs/{run.pk}/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    root_row = page.locator(f"#row-{run.pk}")
    expect(root_row).to_contain_text("campaign")
    expect(root_row.locator("[data-status]")).to_have_text("Paused")
    expect(page.locator("li.node")).to_have_count(1)
    page.wait_for_function("window.hierarchTraceLive === true")
    expect(page.locator("#trace-live")).to_have_text("Live")
    page.evaluate("window.pageMark = 'kept'")

    with transaction.atomic():
        approval_decide(approval=approval, user=dave, decision="approve")

    # The tree grows under the open root, without a reload.
    writer = page.locator("li.node.type-agent")
    expect(writer).to_have_count(1, timeout=LIVE_MS)
    expect(writer.locator(".node-name").first).to_have_text("writer")
    actions = page.locator("li.node.type-action .node-name")
    expect(actions).to_have_text(["draft", "quote"], timeout=LIVE_MS)
    expect(root_row.locator("[data-status]")).to_have_text("Completed", timeout=LIVE_MS)
    finished = Run.objects.get(pk=run.pk)
    assert finished.status == RunStatus.COMPLETED, (finished.error_code, finished.error_message)
    assert page.evaluate("window.pageMark") == "kept"
    for row in Run.objects.filter(trace_id=run.pk):
        expect(page.locator(f"#row-{row.pk} [data-status]")).to_have_text("Completed")
    # The counters are the database's: the root's tokens include every call below it.
    expect(root_row).to_contain_text(f"{finished.total_tokens} tok")

    quote = Run.objects.get(trace_id=run.pk, entity__name="quote")
    call = LLMCall.objects.get(run=quote)
    assert XSS in call.output_response
    page.click(f"#row-{quote.pk} button[data-toggle=detail]")
    detail = page.locator(f"#detail-{quote.pk}")
    expect(detail).to_contain_text("openai/gpt-4o-mini")
    detail.locator(f"#llm-call-{call.pk} summary").click()
    response = detail.locator(f"#llm-call-{call.pk} pre.response")
    expect(response).to_be_visible()
    expect(response).to_contain_text(XSS)
    assert detail.locator("img").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert failures == [], failures


def test_a_collapsed_subtree_opens_on_demand_and_a_deep_link_opens_its_path(
    console_page, alice, acme, failures
):
    """A finished trace: the agent's actions load when it is opened; a link to an action
    shows the whole trace with the action highlighted and its details open."""
    from playwright.sync_api import expect

    draft = EntityFactory(workspace=acme, name="draft")
    solo = EntityFactory(workspace=acme, name="solo", type="AGENT", children=[draft])
    top = EntityFactory(workspace=acme, name="top", type="PROCESS", children=[solo])
    with transaction.atomic():
        run = run_start(entity=top, input_data={})
    wait_for(
        lambda: Run.objects.filter(pk=run.pk, status=RunStatus.COMPLETED).exists(),
        "the run to complete",
    )
    agent = Run.objects.get(trace_id=run.pk, entity__name="solo")
    action = Run.objects.get(trace_id=run.pk, entity__name="draft")

    page = console_page
    page.goto(f"/admin/login/?next=/runs/{run.pk}/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator(f"#node-{agent.pk}")).to_be_visible()
    expect(page.locator(f"#node-{action.pk}")).to_have_count(0)  # collapsed
    page.click(f"#row-{agent.pk} button[data-toggle=children]")
    expect(page.locator(f"#row-{action.pk}")).to_contain_text("draft")
    page.click(f"#row-{agent.pk} button[data-toggle=children]")
    expect(page.locator(f"#row-{action.pk}")).to_be_hidden()

    page.goto(f"/runs/{action.pk}/")
    expect(page.locator(f"#row-{action.pk}")).to_have_class("node-row status-completed is-focus")
    expect(page.locator(f"#detail-{action.pk}")).to_contain_text("local/offline")
    expect(page.locator(f"#row-{run.pk}")).to_contain_text("top")
    assert failures == [], failures
