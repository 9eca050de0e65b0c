"""Module-scoped data for the admin tests."""

from __future__ import annotations

import pytest
from django.db import transaction


@pytest.fixture(scope="module")
def module_db(django_db_setup, django_db_blocker):
    """One transaction around a module: rows made once for all its tests, rolled back after
    the last one. Each test still runs in its own savepoint (pytest-django's `db`)."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield
        transaction.set_rollback(True)
