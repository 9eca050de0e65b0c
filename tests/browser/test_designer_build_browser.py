"""The designer end to end in a real browser (Debian's Chromium against the live server): a
designer builds a Process → Agent → Skill → Action hierarchy with a tool, a condition and a
checkpoint, and tries it, with fields only; a refused cycle and a type rule show at the
child's field; and every designer page fits a phone.

No test here types JSON: every value goes into a field the editor offers (a text box, a
select, a checkbox). A step that could only be done by typing JSON would be a product bug.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from entities.models import ChildLink, Entity
from entities.selectors import entity_definition
from entities.services import entity_save
from tests.factories import EntityFactory, definition, grant

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
# One unbroken word wider than a phone: a page must wrap it, not scroll sideways.
LONG_NAME = "Quarterly" + "_campaign" * 12

# The innermost elements reaching past the phone's right edge and not clipped by a box that
# scrolls or hides its overflow, to name them in a failure.
WIDEST = """() => {
  const clipped = e => { for (let a = e.parentElement; a; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return true } return false };
  const past = e => e.getBoundingClientRect().right > 391;
  return [...document.querySelectorAll('body *')]
    .filter(e => past(e) && e.getClientRects().length && !clipped(e)
      && ![...e.children].some(past))
    .slice(0, 8)
    .map(e => `${e.tagName.toLowerCase()}#${e.id}.${[...e.classList].join('.')}`
      + ` ${Math.round(e.getBoundingClientRect().right)}px`) }"""


def sign_in(page, username: str, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")


def editor_url(entity: Entity, name: str = "entity") -> str:
    return reverse(f"designer:{name}", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})


def assert_fits(page, what: str) -> None:
    """The page does not scroll sideways at the phone's width (its htmx work done first)."""
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{what} is {width} px wide; too wide: {page.evaluate(WIDEST)}"


@pytest.fixture
def campaign(acme, alice):
    """campaign (process, a long display name) → writer (agent) → draft (skill) → render
    (action, with the template_render tool), saved in two versions for the history."""
    render = EntityFactory(
        workspace=acme,
        name="render",
        tools=[{"tool_id": "template_render"}],
        identity={
            "name": "render",
            "display_name": LONG_NAME,
            "description": "renders " + LONG_NAME,
            "persona": {"system_prompt": "You render."},
        },
    )
    draft = EntityFactory(workspace=acme, name="draft", type="SKILL", children=[render])
    writer = EntityFactory(workspace=acme, name="writer", type="AGENT", children=[draft])
    data = definition("campaign", "PROCESS", children=[writer])
    data["identity"]["display_name"] = LONG_NAME
    entity = entity_save(workspace=acme, definition=data, user=alice).entity
    data["identity"]["persona"]["system_prompt"] = "You run the campaign, " + LONG_NAME
    return entity_save(workspace=acme, entity=entity, definition=data, user=alice).entity


def test_every_designer_page_fits_a_phone(console_page, alice, acme, globex, campaign, failures):
    from playwright.sync_api import expect

    page = console_page
    page.set_viewport_size(PHONE)
    grant(alice, globex, "designer")  # two workspaces: the home lists them (one opens its tree)
    sign_in(page, "alice", reverse("designer:index"))
    expect(page.locator("h1")).to_have_text("Designer")
    assert_fits(page, "the designer's home")

    # The tree, a node open and its "Add child" panel too.
    page.goto(reverse("designer:tree", kwargs={"workspace": "acme"}))
    root = page.locator(f"#tree > li.node[data-entity='{campaign.pk}']")
    root.locator(":scope > .node-row > .twisty").click()
    writer = Entity.objects.get(name="writer")
    child = root.locator(f":scope > ul.children > li.node[data-entity='{writer.pk}']")
    expect(child).to_be_visible()
    child.locator(":scope > .node-row summary").click()
    expect(child.locator(":scope > .node-row form.add-new")).to_be_visible()
    assert_fits(page, "the tree with a node open")

    # The editor, every section, with a row added (htmx swaps the section).
    page.goto(editor_url(campaign))
    expect(page.locator("h1")).to_have_text(LONG_NAME)
    page.click("button:text-is('Add a checkpoint')")
    expect(page.locator("[name=governance-checkpoints-0-trigger]")).to_be_visible(timeout=10_000)
    page.locator("#section-raw > summary").click()
    expect(page.locator("#section-raw textarea")).to_be_visible()
    for details in page.locator("#editor details:not([open]) > summary").all():
        if details.is_visible():
            details.click()
    assert_fits(page, "the editor, every section open, a row added")

    # The editor of the action, its tool picked (the picker lists parameters).
    page.goto(editor_url(Entity.objects.get(name="render")))
    expect(page.locator("#tool-picker li.picked")).to_contain_text("template_render")
    assert_fits(page, "the editor of an action with a tool")

    # The versions, two compared.
    page.goto(editor_url(campaign, "versions") + "?a=1.0.0&b=1.0.1")
    expect(page.locator("#compare-title")).to_have_text("Changes from 1.0.0 to 1.0.1")
    assert_fits(page, "the versions compared")

    # Try it, with its result inline.
    page.goto(editor_url(campaign))
    page.locator("#try > summary").click()
    page.click("#try-form button[type=submit]")
    expect(page.locator("#try-result .try-head .run-status")).to_have_text(
        "Completed", timeout=30_000
    )
    expect(page.locator("#try-result .outline li")).not_to_have_count(1)
    assert_fits(page, "Try it with a result")
    assert failures == []


def add_child_row(page, name: str) -> object:
    """Add a row in the editor's Children section (htmx swaps the section) and type `name`
    into its Child box, leaving it (which runs the live check); the new row's box."""
    from playwright.sync_api import expect

    rows = page.locator("#section-children fieldset.row")
    before = rows.count()
    page.click("#section-children button:text-is('Add a child')")
    expect(rows).to_have_count(before + 1)
    box = page.locator(f"[name=children-children-{before}-child]")
    box.fill(name)
    box.press("Tab")
    return box


def test_a_refused_cycle_and_a_type_rule_are_shown_at_the_field(
    console_page, alice, acme, failures
):
    from playwright.sync_api import expect

    page = console_page
    lead = EntityFactory(workspace=acme, name="lead", type="AGENT")
    EntityFactory(workspace=acme, name="chief", type="AGENT", children=[lead])
    skill = EntityFactory(workspace=acme, name="outline", type="SKILL")
    EntityFactory(workspace=acme, name="hiring", type="PROCESS")

    # A cycle: chief is lead's parent, so it cannot be lead's child.
    sign_in(page, "alice", editor_url(lead))
    expect(page.locator("h1")).to_have_text("lead")
    add_child_row(page, "chief")
    slot = page.locator("#err-children-children-0-child")
    expect(slot).to_contain_text("creates a cycle", timeout=10_000)
    expect(slot).to_contain_text("chief")
    expect(page.locator("#problems")).to_contain_text("1 problem")
    page.click("#editor button[name=op][value=save]")
    expect(page.locator("#err-children-children-0-child")).to_contain_text("creates a cycle")
    expect(page.locator("[name=children-children-0-child]")).to_have_value("chief")
    assert not ChildLink.objects.filter(parent=lead).exists()
    assert lead.versions.count() == 1

    # A type rule: a process is of a higher level than a skill.
    page.goto(editor_url(skill))
    expect(page.locator("h1")).to_have_text("outline")
    add_child_row(page, "hiring")
    slot = page.locator("#err-children-children-0-child")
    expect(slot).to_contain_text("higher level than its parent", timeout=10_000)
    page.click("#editor button[name=op][value=save]")
    expect(page.locator("#err-children-children-0-child")).to_contain_text(
        "cannot be a child of the SKILL “outline”"
    )
    assert not ChildLink.objects.filter(parent=skill).exists()
    assert failures == []


def definition_of(entity: Entity) -> dict:
    """The entity's definition as saved now."""
    return entity_definition(entity=Entity.objects.get(pk=entity.pk))


def saved(page, message: str) -> None:
    """Save the editor, and see it saved (the page comes back with the message)."""
    from playwright.sync_api import expect

    page.click("#editor button[name=op][value=save]")
    expect(page.locator(".alert-success")).to_contain_text(message)
    expect(page.locator("#problems .alert-error")).to_have_count(0)


def add_in_tree(page, parent: Entity, kind: str, name: str, description: str) -> Entity:
    """From `parent`'s row in the tree: "Add child", a new entity of `kind` named `name`."""
    from playwright.sync_api import expect

    row = page.locator(f"li.node[data-entity='{parent.pk}']")
    row.locator(":scope > .node-row summary").click()
    form = row.locator(":scope > .node-row form.add-new")
    form.locator("select[name=type]").select_option(kind)
    form.locator("input[name=name]").fill(name)
    form.locator("input[name=description]").fill(description)
    form.locator("button[type=submit]").click()
    child = row.locator(":scope > ul.children > li.node > .node-row > .node-name", has_text=name)
    expect(child).to_be_visible()
    return Entity.objects.get(workspace=parent.workspace, name=name)


def test_a_designer_builds_a_hierarchy_and_tries_it_without_typing_json(
    console_page, alice, acme, failures
):
    """Process → Agent → Skill → Action, built from an empty workspace in the tree and the
    editor: a built-in tool called by a plan step with its argument mapped, a condition on
    a child built as rows, a human checkpoint as a row; then tried on the sample input, the
    checkpoint approved in the inbox, the trial seen to complete inline; then activated.

    Nothing here fills a textarea with JSON, nor any box with JSON: names, prompts and
    descriptions are plain text, everything else is picked or checked. The trial runs the
    drafts as they are (trials run drafts), so nothing needs activating first."""
    from playwright.sync_api import expect

    from runs.models import Run

    page = console_page
    grant(alice, acme, "operator", "approver")  # real runs, and the inbox
    sign_in(page, "alice", reverse("designer:tree", kwargs={"workspace": "acme"}))
    expect(page.locator("#tree")).to_contain_text("No entity yet.")

    # A new process, from the tree's "New: Process".
    page.click(".new-entity a:text-is('Process')")
    expect(page.locator("h1")).to_have_text("New process")
    page.fill("[name=identity-name]", "campaign")
    page.fill("[name=identity-description]", "Plans and writes a product launch campaign.")
    page.fill("[name=identity-system_prompt]", "You run launch campaigns, step by step.")
    saved(page, "Created campaign (process)")
    campaign = Entity.objects.get(workspace=acme, name="campaign")
    assert campaign.type == "PROCESS"

    # An agent under it, a skill under that, an action under the skill: from the tree.
    page.click(".crumbs a:text-is('Acme')")
    writer = add_in_tree(page, campaign, "AGENT", "writer", "Writes the campaign's copy.")
    drafting = add_in_tree(page, writer, "SKILL", "drafting", "Drafts a piece of copy.")
    render = add_in_tree(page, drafting, "ACTION", "render", "Renders the draft.")
    assert [link.child.name for link in campaign.child_links.all()] == ["writer"]
    assert [link.child.name for link in writer.child_links.all()] == ["drafting"]
    assert [link.child.name for link in drafting.child_links.all()] == ["render"]

    # The agent's prompt, in its editor (opened from its node).
    page.locator(f"li.node[data-entity='{writer.pk}'] > .node-row > .node-name").click()
    expect(page.locator("h1")).to_have_text("writer")
    page.fill("[name=identity-system_prompt]", "You write launch copy in plain words.")
    saved(page, "Saved writer")
    prompt = definition_of(writer)["identity"]["persona"]["system_prompt"]
    assert prompt == "You write launch copy in plain words."

    # The action: a built-in tool picked, and a plan step calling it, its argument mapped.
    page.goto(editor_url(render))
    page.check("#tool-picker input[name=tools-use][value=template_render]")
    saved(page, "Saved render")
    page.check("[name=plan-enabled]")
    page.click("#section-plan button:text-is('Add a step')")
    page.fill("[name=plan-steps-0-name]", "Render the draft")
    page.select_option("[name=plan-steps-0-type]", "TOOL_CALL")
    page.select_option("[name=plan-steps-0-target]", "tool:template_render")
    saved(page, "Saved render")
    # Picked, the tool's parameters are boxes to fill.
    step = page.locator("#section-plan fieldset.row").first
    step.locator("details.mapping > summary").click()
    expect(step.locator("details.mapping label")).to_have_text(["template", "variables"])
    page.fill("[name=plan-steps-0-map_0]", "Launch day is here.")
    saved(page, "Saved render")
    tools = definition_of(render)["capabilities"]["tools"]
    assert [tool["tool_id"] for tool in tools] == ["template_render"]
    (plan_step,) = render.plan_steps.all()
    assert (plan_step.type, plan_step.target_tool_id) == ("TOOL_CALL", "template_render")
    assert plan_step.input_mapping == {"template": "Launch day is here."}

    # The process: an input field, a condition on its child built as rows, a checkpoint.
    page.goto(editor_url(campaign))
    page.click("#section-contract button:text-is('Add an input field')")
    page.fill("[name=contract-input-0-name]", "topic")
    page.select_option("[name=contract-input-0-type]", "string")
    page.check("[name=contract-input-0-required]")
    page.select_option("[name=children-children-0-relationship]", "CONDITIONAL")
    page.fill("[name=children-children-0-condition_0_field]", "input.topic")
    page.select_option("[name=children-children-0-condition_0_op]", "not_empty")
    page.click("#section-governance button:text-is('Add a checkpoint')")
    page.select_option("[name=governance-checkpoints-0-trigger]", "BEFORE_EXECUTION")
    page.check("[name=governance-checkpoints-0-approval_required]")
    saved(page, "Saved campaign")
    data = definition_of(campaign)
    assert data["io_contract"]["input"]["schema"]["required"] == ["topic"]
    (link,) = campaign.child_links.all()
    assert link.relationship == "CONDITIONAL"
    assert link.condition["expression"] == {"!!": {"var": "input.topic"}}
    (checkpoint,) = data["governance"]["human_oversight"]["hitl_checkpoints"]
    assert (checkpoint["trigger"], checkpoint["approval_required"]) == ("BEFORE_EXECUTION", True)

    # Try it: the sample input as the form fills it; the checkpoint pauses the trial.
    page.locator("#try > summary").click()
    expect(page.locator("#try-form [name=topic]")).not_to_have_value("")
    page.click("#try-form button[type=submit]")
    result = page.locator("#try-result")
    expect(result.locator(".try-head .run-status")).to_have_text("Paused", timeout=30_000)
    expect(result).to_contain_text("Waiting on a person")
    trial = Run.objects.get(entity=campaign, parent__isnull=True)
    assert trial.trial

    # Approved in the inbox (another tab), the trial completes on the editor's page.
    inbox = page.context.new_page()
    inbox.goto(reverse("approvals:inbox"))
    inbox.locator("#inbox-rows a.row-link").first.click()
    inbox.click("button:text-is('Approve')")
    expect(inbox.locator("#approval-decision")).to_contain_text("Approved")
    expect(result.locator(".try-head .run-status")).to_have_text("Completed", timeout=60_000)
    outline = result.locator(".outline")
    for name in ("campaign", "writer", "drafting", "render"):
        expect(outline).to_contain_text(name)
    tool_run = Run.objects.get(root=trial, entity=render)
    assert tool_run.output_data is not None, tool_run.error_message
    assert "Launch day is here." in str(tool_run.output_data)

    # Tried, the hierarchy goes live: each entity activated with its status button, the
    # lowest first.
    for entity in (render, drafting, writer, campaign):
        page.goto(editor_url(entity))
        page.click(".head-actions button:text-is('Activate')")
        expect(page.locator(".alert-success")).to_have_text(f"{entity.name} is now active.")
        expect(page.locator(".editor-head .badge.status-active")).to_have_text("Active")
    statuses = Entity.objects.filter(workspace=acme).values_list("status", flat=True)
    assert set(statuses) == {"ACTIVE"}
    assert failures == []
