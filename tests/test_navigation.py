"""One navigation across the product (issue 18, item 9): the console, the designer, the admin
and the API docs (Swagger UI and Redoc) render the same bar from one template, with the same
links, the current section marked, and the inbox's live badge; no page speaks the
specification's jargon ("seed 000 §11.1"), and the API docs load nothing from a CDN."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from tests.factories import EntityFactory, approval_request, grant, paused_run

pytestmark = pytest.mark.django_db


@dataclass
class Bar:
    """What a page's top bar holds, as parsed from its HTML."""

    bars: int = 0
    links: dict[str, str] = field(default_factory=dict)  # href -> label
    current: list[str] = field(default_factory=list)  # labels marked aria-current="page"
    badge: str | None = None  # the inbox badge's text, when the bar has it
    resources: list[str] = field(default_factory=list)  # every <script src> and <link href>


class BarParser(HTMLParser):
    """Reads the `<header class="topbar">` of a page: its nav's links and the inbox badge."""

    def __init__(self) -> None:
        super().__init__()
        self.bar = Bar()
        self._depth = {"header": 0, "nav": 0}  # how deep inside the bar / its nav we are
        self._link: tuple[str, bool] | None = None
        self._label: list[str] = []
        self._in_badge = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "script" and attr.get("src"):
            self.bar.resources.append(attr["src"] or "")
        if tag == "link" and attr.get("href"):
            self.bar.resources.append(attr["href"] or "")
        if tag == "header" and "topbar" in (attr.get("class") or "").split():
            self.bar.bars += 1
            self._depth["header"] = 1
            return
        if not self._depth["header"]:
            return
        if tag in self._depth:
            self._depth[tag] += 1
        if tag == "nav" and attr.get("id") == "topnav":
            self._depth["nav"] = 1
        if tag == "a" and self._depth["nav"]:
            self._link = (attr.get("href") or "", attr.get("aria-current") == "page")
            self._label = []
        if tag == "span" and attr.get("id") == "inbox-badge":
            self._in_badge = True
            self.bar.badge = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._link is not None:
            href, current = self._link
            label = " ".join("".join(self._label).split())
            self.bar.links[href] = label
            if current:
                self.bar.current.append(label)
            self._link = None
        if tag == "span":
            self._in_badge = False
        if tag in self._depth and self._depth[tag]:
            self._depth[tag] -= 1

    def handle_data(self, data: str) -> None:
        if self._link is not None:
            self._label.append(data)
        if self._in_badge:
            self.bar.badge = (self.bar.badge or "") + data.strip()


def bar_of(html: str) -> Bar:
    parser = BarParser()
    parser.feed(html)
    return parser.bar


@pytest.fixture
def designer_with_a_request(acme, alice):
    """Alice designs in Acme and approves there: one request waits for her."""
    grant(alice, acme, "approver")
    entity = EntityFactory(workspace=acme, name="publisher")
    approval_request(paused_run(entity))
    return alice, entity


def pages(entity) -> list[tuple[str, str]]:
    """Every kind of page the bar is on, with the label of the section it belongs to."""
    return [
        (reverse("dashboard:index"), "Dashboard"),
        (reverse("runs:list"), "Runs"),
        (reverse("approvals:inbox"), "Inbox 1"),
        (reverse("designer:index"), "Designer"),
        (reverse("account:tokens"), "API tokens"),
        (reverse("admin:index"), "Admin"),
        (reverse("admin:entities_entity_change", args=[entity.pk]), "Admin"),
        (reverse("api:docs"), "API"),
        (reverse("api:redoc"), "API"),
    ]


def test_every_page_has_the_same_bar_with_its_section_marked(client, designer_with_a_request):
    alice, entity = designer_with_a_request
    client.force_login(alice)
    expected = {
        reverse("dashboard:index"): "Dashboard",
        reverse("runs:list"): "Runs",
        reverse("approvals:inbox"): "Inbox 1",
        reverse("designer:index"): "Designer",
        reverse("account:tokens"): "API tokens",
        reverse("api:docs"): "API",
        reverse("admin:index"): "Admin",
    }
    for path, section in pages(entity):
        response = client.get(path, follow=True)  # the designer's index opens a workspace
        assert response.status_code == 200, path
        bar = bar_of(response.content.decode())
        assert bar.bars == 1, path
        assert bar.links == expected, path
        assert bar.current == [section], path
        assert bar.badge == "1", path


def test_the_inbox_badge_is_live_on_every_page(client, designer_with_a_request):
    alice, entity = designer_with_a_request
    client.force_login(alice)
    for path, _section in pages(entity):
        html = client.get(path, follow=True).content.decode()
        assert 'ws-connect="/ws/approvals/' in html, path
        assert html.count("hierarch/vendor/htmx-2.0.11.min.js") == 1, path
        assert html.count("hierarch/topbar.js") == 1, path


@pytest.mark.parametrize("jargon", ["seed 0", "(seed", "§"])
def test_no_page_speaks_the_specifications_jargon(client, designer_with_a_request, jargon):
    alice, entity = designer_with_a_request
    client.force_login(alice)
    extra = [
        reverse("admin:entities_entity_import"),
        reverse("admin:entities_entity_add"),
        reverse("api:schema"),
    ]
    for path in [path for path, _section in pages(entity)] + extra:
        response = client.get(path, follow=True)
        assert response.status_code == 200, path
        assert jargon not in response.content.decode(), path


def test_the_api_docs_load_nothing_from_a_cdn(client, designer_with_a_request):
    alice, _entity = designer_with_a_request
    client.force_login(alice)
    for name in ("api:docs", "api:redoc"):
        bar = bar_of(client.get(reverse(name)).content.decode())
        assert bar.resources, name
        assert all(src.startswith("/") and not src.startswith("//") for src in bar.resources), (
            name,
            bar.resources,
        )
    # Redoc draws Redocly's logo from their CDN whatever its options: the page refuses it.
    redoc = client.get(reverse("api:redoc")).content.decode()
    assert 'Content-Security-Policy" content="img-src \'self\' data:"' in redoc
    assert "fonts.googleapis.com" not in redoc


def test_the_admin_keeps_its_breadcrumbs_and_its_theme_switch(client, designer_with_a_request):
    alice, entity = designer_with_a_request
    client.force_login(alice)
    html = client.get(reverse("admin:entities_entity_change", args=[entity.pk])).content.decode()
    assert '<div class="breadcrumbs">' in html
    assert html.count('class="theme-toggle"') == 1
    assert 'id="header"' not in html  # the bar replaced the admin's own header


def test_a_signed_out_visitor_sees_only_the_brand(client):
    for path in (reverse("admin:login"), reverse("api:docs")):
        html = client.get(path).content.decode()
        bar = bar_of(html)
        assert bar.bars == 1, path
        assert bar.links == {}, path
        assert "Log out" not in html, path


def test_the_parser_sees_a_bar_its_links_and_the_marked_one():
    bar = bar_of(
        '<header class="topbar"><a class="brand" href="/">H</a><nav id="topnav">'
        '<a href="/a">A</a><a href="/b" aria-current="page">B <span id="inbox-badge">3</span>'
        '</a></nav></header><nav><a href="/elsewhere">not the bar</a></nav>'
        '<script src="https://cdn.example/x.js"></script>'
    )
    assert bar.bars == 1
    assert bar.links == {"/a": "A", "/b": "B 3"}
    assert bar.current == ["B 3"]
    assert bar.badge == "3"
    assert bar.resources == ["https://cdn.example/x.js"]
