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
    # The trace page's script is deferred: a click before it ran would do nothing.
    page.wait_for_url(lambda url: "/admin/login/" not in url, wait_until="load")
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
    # The trace page's script is deferred: a click before it ran would do nothing.
    page.wait_for_url(lambda url: "/admin/login/" not in url, wait_until="load")
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


# -- the header, what is open, and finding nodes ------------------------------------------------


def sign_in(page, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    # The trace page's script is deferred: a click before it ran would do nothing.
    page.wait_for_url(lambda url: "/admin/login/" not in url, wait_until="load")


def test_the_header_says_live_while_the_run_goes_and_ended_once_it_ends_also_after_a_reload(
    console_page, alice, dave, acme, failures
):
    """Alice operates in Acme: she sees Cancel while the run waits, not once it has ended."""
    from playwright.sync_api import expect

    from tests.factories import grant

    grant(alice, acme, "operator")
    draft = EntityFactory(workspace=acme, name="draft")
    process = EntityFactory(
        workspace=acme,
        name="gated",
        type="PROCESS",
        children=[EntityFactory(workspace=acme, name="helper", type="AGENT", children=[draft])],
        governance={"human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_EXECUTION"}]}},
    )
    with transaction.atomic():
        run = run_start(entity=process, input_data={})
    approval = wait_for(lambda: Approval.objects.filter(run=run).first(), "the request")

    page = console_page
    sign_in(page, f"/runs/{run.pk}/")
    page.wait_for_function("window.hierarchTraceLive === true")
    live = page.locator("#trace-live")
    expect(live).to_have_text("Live")
    expect(page.locator("#trace-head")).to_contain_text("Cancel run")

    with transaction.atomic():
        approval_decide(approval=approval, user=dave, decision="approve")

    # The run ends while the page is open: the header follows, without a reload.
    expect(live).to_have_text("Ended · Completed", timeout=LIVE_MS)
    expect(live).to_have_attribute("data-state", "ended")
    expect(page.locator("#trace-head")).not_to_contain_text("Cancel run")
    expect(page.locator("#trace-head")).to_contain_text("Re-run with the same input")
    page.wait_for_timeout(500)  # a late socket message must not turn it back to "Live"
    expect(live).to_have_text("Ended · Completed")

    page.reload()
    expect(page.locator("#trace-live")).to_have_text("Ended · Completed")
    expect(page.locator("#trace-head")).not_to_contain_text("Cancel run")
    expect(page.locator("#trace-head")).not_to_contain_text("Live")
    assert failures == [], failures


def test_open_nodes_stay_open_across_a_reload_with_arrows_that_match_and_step_names(
    console_page, alice, acme, failures
):
    from playwright.sync_api import expect

    from runs.models import StepRun

    actions = [EntityFactory(workspace=acme, name=name) for name in ("draft", "polish")]
    agent_entity = EntityFactory(workspace=acme, name="writer", type="AGENT", children=actions)
    top = EntityFactory(workspace=acme, name="top", type="PROCESS", children=[agent_entity])
    with transaction.atomic():
        run = run_start(entity=top, input_data={})
    wait_for(
        lambda: Run.objects.filter(pk=run.pk, status=RunStatus.COMPLETED).exists(),
        "the run to complete",
    )
    agent = Run.objects.get(trace_id=run.pk, entity__name="writer")
    children = list(Run.objects.filter(parent=agent).order_by("created_at", "group_index"))
    assert len(children) == 2

    def started_by(child: Run) -> str:
        key = child.parent_step_key.rsplit("#", 1)[0]
        return StepRun.objects.filter(run_id=child.parent_id, step_key=key).first().name

    page = console_page
    sign_in(page, f"/runs/{run.pk}/")
    toggle = page.locator(f"#row-{agent.pk} [data-toggle=children]")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    # The agent's row is named by the root's plan step that started it, then its entity.
    expect(page.locator(f"#row-{agent.pk} .node-step")).to_have_text(started_by(agent))
    expect(page.locator(f"#row-{agent.pk} .node-name")).to_have_text("writer")
    toggle.click()
    for child in children:
        expect(page.locator(f"#row-{child.pk} .node-step")).to_have_text(started_by(child))
    expect(toggle).to_have_attribute("aria-expanded", "true")
    root_toggle = page.locator(f"#row-{run.pk} [data-toggle=children]")
    expect(root_toggle).to_have_attribute("aria-expanded", "true")

    page.reload()
    toggle = page.locator(f"#row-{agent.pk} [data-toggle=children]")
    expect(page.locator(f"#row-{children[0].pk}")).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    # Every arrow says what its list shows.
    page.wait_for_selector("#trace[data-restored=true]")
    mismatched = page.evaluate(
        """Array.from(document.querySelectorAll('[data-toggle=children]')).filter((b) => {
             const list = document.getElementById(b.getAttribute('aria-controls'));
             return (b.getAttribute('aria-expanded') === 'true') === list.hidden;
           }).length"""
    )
    assert mismatched == 0

    # Closed is remembered too: closing the root survives a reload.
    page.locator(f"#row-{run.pk} [data-toggle=children]").click()
    expect(page.locator(f"#row-{agent.pk}")).to_be_hidden()
    page.reload()
    page.wait_for_selector("#trace[data-restored=true]")
    expect(page.locator(f"#row-{agent.pk}")).to_be_hidden()
    expect(page.locator(f"#row-{run.pk} [data-toggle=children]")).to_have_attribute(
        "aria-expanded", "false"
    )
    assert failures == [], failures


def test_the_filter_the_search_and_the_failed_path(console_page, alice, acme, failures):
    """A finished trace of 1 + 2 + 4 + 8 nodes where one action failed, and a model call of
    an entity whose audit level leaves the model's text out of the log."""
    from decimal import Decimal

    from playwright.sync_api import expect

    from tests.support.traces import build_trace

    action = EntityFactory(
        workspace=acme,
        name="parse",
        governance={"human_oversight": {"audit_level": "MINIMAL"}},
    )
    skill = EntityFactory(workspace=acme, name="extract", type="SKILL", children=[action])
    agent = EntityFactory(workspace=acme, name="analyst", type="AGENT", children=[skill])
    process = EntityFactory(workspace=acme, name="video_ad", type="PROCESS", children=[agent])
    trace = build_trace(
        {"PROCESS": process, "AGENT": agent, "SKILL": skill, "ACTION": action}, 2, 2, 2
    )
    root = trace["PROCESS"][0]
    failed = trace["ACTION"][5]  # under the second agent's first skill
    skill_run = Run.objects.get(pk=failed.parent_id)
    Run.objects.filter(pk=failed.pk).update(
        status=RunStatus.FAILED, error_code="TOOL_ERROR", error_message="<b>broke</b>"
    )
    LLMCall.objects.create(
        run=failed,
        call_key=f"{failed.pk}:1",
        model_provider="local",
        model_name="offline",
        input_prompt="[system] [not logged: this entity's audit settings leave it out]",
        output_response="",
        prompt_tokens=3,
        completion_tokens=1,
        total_tokens=4,
        cost_usd=Decimal("0.000004"),
        latency_ms=2,
    )

    page = console_page
    sign_in(page, f"/runs/{root.pk}/")
    failed_row = page.locator(f"#row-{failed.pk}")
    expect(failed_row).to_have_count(0)  # collapsed two levels down
    expect(page.locator("#trace-live")).to_have_text("Ended · Completed")

    page.click("#trace-failed-path")
    expect(failed_row).to_be_visible()
    expect(failed_row).to_contain_text("<b>broke</b>")  # as text
    for ancestor in (skill_run.parent_id, skill_run.pk):
        expect(page.locator(f"#row-{ancestor} [data-toggle=children]")).to_have_attribute(
            "aria-expanded", "true"
        )
    expect(page.locator("#trace-found")).to_contain_text("1 failed node")

    # The status filter: only the failed node and the path to it stay.
    page.select_option("#trace-status", "failed")
    expect(page.locator("#trace-found")).to_have_text("1 node matches.")
    visible = page.locator("li.node:visible")
    expect(visible).to_have_count(4)  # root, agent, skill, the failed action
    expect(page.locator(f"#row-{trace['AGENT'][0].pk}")).to_be_hidden()
    page.select_option("#trace-status", "all")
    expect(page.locator(f"#row-{trace['AGENT'][0].pk}")).to_be_visible()

    # The search: by entity name, opening what it takes to show every match.
    page.fill("#trace-search", "extract")
    expect(page.locator("#trace-found")).to_have_text("4 nodes match.")
    for skill_row in trace["SKILL"]:
        expect(page.locator(f"#row-{skill_row.pk}")).to_be_visible()
    expect(page.locator(f"#row-{trace['ACTION'][0].pk}")).to_be_hidden()
    page.fill("#trace-search", "nothing like it")
    expect(page.locator("#trace-found")).to_have_text("No node matches.")
    page.fill("#trace-search", "")
    expect(page.locator(f"#row-{root.pk}")).to_be_visible()

    # The model call whose response the audit level left out says so.
    page.click(f"#row-{failed.pk} button[data-toggle=detail]")
    box = page.locator(f"#detail-{failed.pk} .llm-call")
    box.locator("summary").click()
    expect(box.locator(".not-logged")).to_contain_text("(audit level MINIMAL)")
    expect(box.locator("pre.response")).to_have_count(0)
    assert page.evaluate("document.querySelectorAll('#trace b').length") == 0
    assert failures == [], failures
