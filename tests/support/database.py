"""The test database as a URL, for the processes a test starts (they meet it there)."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def database_url() -> str:
    """DATABASE_URL naming the database this test uses: pytest-django's `test_<name>` on
    PostgreSQL, the test file on SQLite (tests/conftest.py keeps it in a file)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    credentials = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{credentials}@{host}{port}/{quote(db['NAME'], safe='')}"
