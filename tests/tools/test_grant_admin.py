"""Tool grants on the tool's admin page: given and taken back by the workspace's admins,
to its members only; shown read-only to the rest of the workspace.

ada administers Acme, alice designs in Acme, dave operates Acme, charlie designs in Globex.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from governance.models import AuditRecord
from tests.factories import UserFactory, grant, make_tool
from tests.support.page_form import added_row, form_data
from tools.models import ToolGrant
from tools.services import tool_grant_add

pytestmark = pytest.mark.smoke

PREFIX = "grants"


@pytest.fixture
def ada(acme):
    return grant(UserFactory(username="ada"), acme, "admin")


@pytest.fixture
def dave(acme):
    return grant(UserFactory(username="dave"), acme, "operator")


@pytest.fixture
def launch(acme):
    return make_tool(
        acme,
        "launch",
        implementation="simulated",
        permissions="EXECUTE",
        output_schema={"type": "object"},
    )


def change_url(tool) -> str:
    return reverse("admin:tools_tool_change", args=[tool.pk])


def add_grant(client, tool, user) -> object:
    page = client.get(change_url(tool)).content
    data = form_data(page, "tool_form")
    data.update(added_row(page, "tool_form", PREFIX, 0))
    data.update({f"{PREFIX}-TOTAL_FORMS": "1", f"{PREFIX}-0-user": str(user.pk)})
    return client.post(change_url(tool), data)


def test_an_admin_grants_a_member_and_is_recorded_as_the_granter(client, ada, dave, launch):
    client.force_login(ada)
    response = add_grant(client, launch, dave)

    assert response.status_code == 302, response.context["inline_admin_formsets"][0].formset.errors
    grant_row = ToolGrant.objects.get()
    assert (grant_row.tool, grant_row.user, grant_row.granted_by) == (launch, dave, ada)
    page = client.get(change_url(launch)).content.decode()
    assert "Tool grants (who may call an EXECUTE tool in the runs they start)" in page
    assert "dave" in page
    record = AuditRecord.objects.get(action="tool.granted")
    assert (record.actor_id, record.after) == (ada.pk, {"user": "dave", "permission": "EXECUTE"})


def test_the_user_to_grant_is_chosen_among_the_workspaces_members(
    client, ada, dave, charlie, launch
):
    client.force_login(ada)
    page = client.get(change_url(launch)).content.decode()
    template = page[page.index(f'name="{PREFIX}-__prefix__-user"') :]
    choices = template[: template.index("</select>")]
    assert ">dave<" in choices and ">ada<" in choices
    assert "charlie" not in choices

    response = add_grant(client, launch, charlie)
    assert response.status_code == 200
    errors = response.context["inline_admin_formsets"][0].formset.errors[0]["user"]
    assert errors == ["Select a valid choice. That choice is not one of the available choices."]
    assert not ToolGrant.objects.exists()


def test_an_admin_takes_a_grant_back(client, ada, dave, launch):
    granted = tool_grant_add(tool=launch, user=dave, granted_by=ada)
    client.force_login(ada)
    data = form_data(client.get(change_url(launch)).content, "tool_form")
    data[f"{PREFIX}-0-DELETE"] = "on"
    response = client.post(change_url(launch), data)

    assert response.status_code == 302
    assert not ToolGrant.objects.filter(pk=granted.pk).exists()
    assert AuditRecord.objects.get(action="tool.grant_revoked").before["user"] == "dave"


def test_a_designer_sees_the_grants_but_cannot_change_them(client, ada, alice, dave, launch):
    tool_grant_add(tool=launch, user=dave, granted_by=ada)
    client.force_login(alice)
    page = client.get(change_url(launch)).content.decode()
    assert "Tool grants" in page and "dave" in page
    assert f'name="{PREFIX}-__prefix__-user"' not in page  # no "add another" row

    response = add_grant(client, launch, alice)
    assert response.status_code == 302  # the tool saves; the grant rows are not taken
    assert list(ToolGrant.objects.values_list("user__username", flat=True)) == ["dave"]


def test_a_grant_is_not_moved_to_someone_else(client, ada, alice, dave, launch):
    tool_grant_add(tool=launch, user=dave, granted_by=ada)
    client.force_login(ada)
    data = form_data(client.get(change_url(launch)).content, "tool_form")
    data[f"{PREFIX}-0-user"] = str(alice.pk)
    client.post(change_url(launch), data)
    assert list(ToolGrant.objects.values_list("user__username", flat=True)) == ["dave"]


def test_grants_show_on_an_execute_tool_only(client, ada, acme, launch):
    client.force_login(ada)
    assert "Tool grants" in client.get(change_url(launch)).content.decode()
    writer = make_tool(acme, "writer", permissions="WRITE")
    assert "Tool grants" not in client.get(change_url(writer)).content.decode()
    assert "Tool grants" not in client.get(reverse("admin:tools_tool_add")).content.decode()
