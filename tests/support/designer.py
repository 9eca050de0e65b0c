"""The designer's pages as a test reads them: an entity's addresses, and its editor's form as
a browser would post it."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from entities.models import Entity
from tests.support.page_form import form_data


def url(entity: Entity, name: str = "entity") -> str:
    return reverse(f"designer:{name}", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})


def shown(client: Client, address: str) -> dict:
    """The editor's fields as the page shows them."""
    response = client.get(address)
    assert response.status_code == 200
    return form_data(response.content, "editor")
