"""Personas: alice designs in Acme, bob is her teammate (viewer), charlie designs in Globex."""

from __future__ import annotations

import pytest

from tests.factories import UserFactory, WorkspaceFactory, grant


@pytest.fixture
def acme(db):
    return WorkspaceFactory(name="Acme", slug="acme")


@pytest.fixture
def globex(db):
    return WorkspaceFactory(name="Globex", slug="globex")


@pytest.fixture
def alice(acme):
    return grant(UserFactory(username="alice"), acme, "designer")


@pytest.fixture
def bob(acme):
    return grant(UserFactory(username="bob"), acme, "viewer")


@pytest.fixture
def charlie(globex):
    return grant(UserFactory(username="charlie"), globex, "designer")


@pytest.fixture
def root(db):
    return UserFactory(username="root", is_superuser=True)
