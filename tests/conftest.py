"""Personas: alice designs in Acme, bob is her teammate (viewer), charlie designs in Globex;
dave approves in Acme, erin approves in Globex."""

from __future__ import annotations

import pytest
from django.db.backends.signals import connection_created

from tests.factories import UserFactory, WorkspaceFactory, grant


def _allow_the_test_flush_to_truncate_the_audit_log(sender, connection, **kwargs):
    # On PostgreSQL a trigger refuses TRUNCATE of the audit tables (governance migration
    # 0007); Django's flush after a transactional test truncates every table. A superuser's
    # session may allow it, and only the test process's sessions do.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET hierarch.audit_truncate = 'allow'")


connection_created.connect(_allow_the_test_flush_to_truncate_the_audit_log)


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
def dave(acme):
    return grant(UserFactory(username="dave"), acme, "approver")


@pytest.fixture
def erin(globex):
    return grant(UserFactory(username="erin"), globex, "approver")


@pytest.fixture
def root(db):
    return UserFactory(username="root", is_superuser=True)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The default hasher is deliberately slow; tests create many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def plain_static_storage(settings):
    # With DEBUG off, settings name whitenoise's manifest storage, which refuses every
    # `{% static %}` until collectstatic has run; tests render pages from the finders instead.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(scope="session")
def _inline_pool_stopped_before_the_test_database_goes(django_db_setup):
    """The inline executor's threads keep their database connections between steps (as a
    server's do); the test database cannot be dropped while they hold them. Set up after
    the test database, so torn down before it."""
    yield
    from runs import executors

    executors.shutdown_inline_pool()


@pytest.fixture(autouse=True)
def _inline_pool_guard(request):
    if request.node.get_closest_marker("django_db") or {"db", "transactional_db"} & set(
        request.fixturenames
    ):
        request.getfixturevalue("_inline_pool_stopped_before_the_test_database_goes")
