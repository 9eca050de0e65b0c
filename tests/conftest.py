"""Personas: alice designs in Acme, bob is her teammate (viewer), charlie designs in Globex;
dave approves in Acme, erin approves in Globex.

Session rules: on SQLite the test database is a file in WAL mode, as `make run`'s is; the work
a test hands to background threads ends with the test; with HIERARCH_TESTS_NO_SKIP=1 (CI's
run on PostgreSQL, Redis, Celery and Chromium) a skipped test fails the run."""

from __future__ import annotations

import os

import pytest
from django.db.backends.signals import connection_created

from tests.factories import UserFactory, WorkspaceFactory, grant

# How long a test's background work (steps of the inline executor, webhook attempts,
# notifications) may take to end once the test is over.
BACKGROUND_WORK_SECONDS = 60.0


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


# -- the SQLite test database -------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """On SQLite, the test database is a file, as `make run`'s is (WAL, IMMEDIATE
    transactions, a busy timeout: config/settings.py), not pytest-django's shared in-memory
    database: there, a table another connection is using answers "database table is locked"
    at once instead of waiting, so every test whose threads (the inline executor, webhook
    and notification senders, concurrent requests) meet the test's own queries was flaky."""
    from django.conf import settings

    for alias, database in settings.DATABASES.items():
        if database["ENGINE"] == "django.db.backends.sqlite3":
            folder = tmp_path_factory.mktemp("database")
            database.setdefault("TEST", {})["NAME"] = str(folder / f"test_{alias}.sqlite3")


# -- background work ends with the test ---------------------------------------------------------


def _stop_background_work(nodeid: str) -> None:
    from runs import background

    if not background.quiesce(timeout=BACKGROUND_WORK_SECONDS):
        pytest.fail(
            f"{nodeid}: {background.unfinished()} pieces of background work (inline steps, "
            f"webhook attempts, notifications) still run {BACKGROUND_WORK_SECONDS:g} s after "
            "the test",
            pytrace=False,
        )


def _commits(request: pytest.FixtureRequest) -> bool:
    marker = request.node.get_closest_marker("django_db")
    transactional = marker is not None and (
        marker.kwargs.get("transaction") or (len(marker.args) > 0 and marker.args[0])
    )
    return bool(transactional) or bool(
        {"transactional_db", "live_server"} & set(request.fixturenames)
    )


@pytest.fixture(autouse=True)
def _background_work_ends_before_the_tables_are_emptied(request):
    """A test that commits hands work to background threads (the inline executor, webhook and
    notification senders); it stops before pytest-django empties the tables, so no thread
    writes into the next test's database. (A test inside a transaction hands over nothing its
    threads could see; `pytest_runtest_teardown` below stops its work after the rollback.)"""
    if not _commits(request):
        yield
        return
    request.getfixturevalue("transactional_db")  # set up first, so torn down after this
    yield
    _stop_background_work(request.node.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    _stop_background_work(item.nodeid)


# -- no skips where every service is there ------------------------------------------------------


def _no_skips() -> bool:
    return os.environ.get("HIERARCH_TESTS_NO_SKIP", "") not in ("", "0")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """With HIERARCH_TESTS_NO_SKIP=1 (CI, with PostgreSQL, Redis, a broker and Chromium), a
    skipped test fails: a test that silently does not run proves nothing."""
    report = yield
    if _no_skips() and report.skipped and not hasattr(report, "wasxfail"):
        _fail_the_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if _no_skips() and report.skipped:
        _fail_the_skip(report)
    return report


def _fail_the_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"skipped where nothing may be (HIERARCH_TESTS_NO_SKIP=1): {reason}"
