"""Fixtures of the engine's tests."""

from __future__ import annotations

import pytest

from tests.support.worlds import MemoryWorld, OrmWorld, World


@pytest.fixture(params=["memory", pytest.param("orm", marks=pytest.mark.django_db)])
def each_store(request: pytest.FixtureRequest) -> World:
    """A world on each store: the in-memory one (no database) and the ORM one."""
    if request.param == "memory":
        return MemoryWorld()
    return OrmWorld(request.getfixturevalue("acme"))
