"""Marks shared by the test modules."""

from __future__ import annotations

import pytest
from django.db import connection


def postgresql_only(reason: str) -> pytest.MarkDecorator:
    """Skip on SQLite (the suite's default database), saying why the test needs PostgreSQL;
    CI runs the suite on PostgreSQL, where these run."""
    return pytest.mark.skipif(connection.vendor != "postgresql", reason=reason)
