"""The designer's tree in a real browser (Debian's Chromium against the live server): a
designer opens nodes, searches and shows a hit in the tree, adds a new child and an existing
one, moves a child with the keyboard, removes one, sees a refused cycle at its node, finds
the tree as it was after a reload, and the page fits a phone."""

from __future__ import annotations

import pytest

from entities.models import ChildLink, Entity
from entities.services import entity_link_child
from tests.factories import EntityFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def children_of(name: str) -> list[str]:
    links = ChildLink.objects.filter(parent__name=name).order_by("order", "id")
    return list(links.values_list("child__name", flat=True))


@pytest.fixture
def hierarchy(acme):
    outline = EntityFactory(workspace=acme, name="outline")
    polish = EntityFactory(workspace=acme, name="polish", metadata={"tags": ["style"]})
    draft = EntityFactory(workspace=acme, name="draft", type="SKILL", children=[outline, polish])
    writer = EntityFactory(workspace=acme, name="writer", type="AGENT", children=[draft])
    EntityFactory(workspace=acme, name="campaign", type="PROCESS", children=[writer])
    EntityFactory(workspace=acme, name="review", type="SKILL")
    EntityFactory(workspace=acme, name="lead", type="AGENT")
    EntityFactory(workspace=acme, name="aide", type="AGENT")


def node(page, *names: str):
    """The node reached by `names` from a root (`node(page, "campaign", "writer")`)."""
    locator = page.locator("#tree")
    for depth, name in enumerate(names):
        entity = Entity.objects.get(name=name).pk
        step = f"li.node[data-entity='{entity}']"
        locator = locator.locator(
            f":scope > {step}" if depth == 0 else f":scope > ul.children > {step}"
        )
    return locator


def names_under(page, *names: str) -> list[str]:
    return (
        node(page, *names)
        .locator(":scope > ul.children > li.node > .node-row > .node-name")
        .all_inner_texts()
    )


def test_a_designer_builds_in_the_tree(console_page, alice, hierarchy, failures):
    from playwright.sync_api import expect

    page = console_page
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto("/admin/login/?next=/designer/acme/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Acme")
    roots = page.locator("#tree > li.node > .node-row > .node-name")
    expect(roots).to_have_text(["campaign", "aide", "lead", "review"])

    # Expand: children load when a node opens.
    node(page, "campaign").locator(":scope > .node-row > .twisty").click()
    expect(node(page, "campaign", "writer")).to_be_visible()
    node(page, "campaign", "writer").locator(":scope > .node-row > .twisty").click()
    draft = node(page, "campaign", "writer", "draft")
    expect(draft).to_be_visible()
    expect(draft.locator(":scope > .node-row .type-badge")).to_have_text("SKILL")

    # Search by tag, and show the hit in the tree.
    page.fill("#tree-q", "style")
    hit = page.locator("#tree-search-results li.hit")
    expect(hit).to_have_count(1)
    expect(hit.locator(".hit-path")).to_have_text("campaign › writer › draft › polish")
    hit.locator("button.reveal").click()
    polish = node(page, "campaign", "writer", "draft", "polish")
    expect(polish).to_have_class("node is-found")
    expect(polish.locator(":scope > .node-row > .node-name")).to_be_focused()

    # Add a new child.
    draft.locator(":scope > .node-row summary").click()
    form = draft.locator(":scope > .node-row form.add-new")
    form.locator("select[name=type]").select_option("ACTION")
    form.locator("input[name=name]").fill("caption")
    form.locator("button[type=submit]").click()
    expect(draft.locator(":scope > ul.children > li.node")).to_have_count(3)
    assert names_under(page, "campaign", "writer", "draft") == ["outline", "polish", "caption"]
    assert Entity.objects.get(name="caption").status == "DRAFT"
    assert children_of("draft") == ["outline", "polish", "caption"]
    expect(draft.locator(":scope > .node-row .version")).to_have_text("v1.1.0")

    # Add an existing child, picked by search.
    review = node(page, "review")
    review.locator(":scope > .node-row summary").click()
    review.locator(":scope > .node-row input[type=search]").fill("outl")
    review.locator(":scope > .node-row .candidates button", has_text="outline").click()
    expect(review.locator(":scope > ul.children > li.node")).to_have_count(1)
    expect(review.locator(":scope > ul.children .reused")).to_have_text("used by 2 parents")
    assert children_of("review") == ["outline"]

    # Reorder with the keyboard: caption goes up one place, and keeps the focus.
    caption = node(page, "campaign", "writer", "draft", "caption")
    caption.locator(":scope > .node-row > .node-name").focus()
    page.keyboard.press("Alt+ArrowUp")
    expect(draft.locator(":scope > ul.children > li.node > .node-row > .node-name")).to_have_text(
        ["outline", "caption", "polish"]
    )
    assert children_of("draft") == ["outline", "caption", "polish"]
    moved = node(page, "campaign", "writer", "draft", "caption")
    expect(moved.locator(":scope > .node-row .move-up")).to_be_focused()

    # Remove a child (the confirmation is accepted).
    node(page, "campaign", "writer", "draft", "polish").locator(
        ":scope > .node-row .remove"
    ).click()
    expect(draft.locator(":scope > ul.children > li.node > .node-row > .node-name")).to_have_text(
        ["outline", "caption"]
    )
    assert children_of("draft") == ["outline", "caption"]
    assert Entity.objects.filter(name="polish").exists()

    # A cycle made meanwhile elsewhere is refused at the node, and nothing is saved.
    lead = node(page, "lead")
    lead.locator(":scope > .node-row summary").click()
    lead.locator(":scope > .node-row input[type=search]").fill("aide")
    candidate = lead.locator(":scope > .node-row .candidates button", has_text="aide")
    expect(candidate).to_be_visible()
    entity_link_child(parent=Entity.objects.get(name="aide"), child=Entity.objects.get(name="lead"))
    candidate.click()
    problem = lead.locator(":scope > ul.children .node-problems")
    expect(problem).to_contain_text("creates a cycle: lead → aide → lead")
    assert children_of("lead") == []

    # A reload opens what was open.
    page.reload()
    expect(node(page, "campaign", "writer", "draft", "caption")).to_be_visible()

    # The tree fits a phone, open as it is.
    page.set_viewport_size(PHONE)
    page.reload()
    expect(node(page, "campaign", "writer", "draft", "caption")).to_be_visible()
    page.wait_for_load_state("networkidle")
    node(page, "campaign", "writer", "draft").locator(":scope > .node-row summary").click()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the tree is {width} px wide"
    assert failures == []
