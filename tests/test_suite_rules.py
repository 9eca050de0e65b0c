"""The rules tests/conftest.py sets for the whole suite: background work ends with its test,
threads and the test meet in the database without "database table is locked", and with
HIERARCH_TESTS_NO_SKIP=1 (CI on every service) a skipped test fails the run. And a rule of the
house style: no module imports a test module; shared helpers live in tests/support/."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import connections

from entities.models import Workspace

ROOT = Path(__file__).resolve().parent.parent
CASES = "tests/support/suite_rules_cases.py"
TESTS = ROOT / "tests"


def run_cases(**env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "HIERARCH_TESTS_NO_SKIP"}
    return subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"]
        + ["-o", "python_files=suite_rules_cases.py", CASES],
        cwd=ROOT,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_work_a_test_left_to_threads_is_stopped_before_the_next_test():
    result = run_cases()

    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed, 2 skipped" in result.stdout, result.stdout
    assert "a reason given by a mark" in result.stdout
    assert "a reason given from the body" in result.stdout


def test_with_no_skips_required_a_skipped_test_fails_with_its_reason():
    result = run_cases(HIERARCH_TESTS_NO_SKIP="1")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 passed" in result.stdout and "skipped" not in result.stdout.splitlines()[-1]
    assert "skipped where nothing may be (HIERARCH_TESTS_NO_SKIP=1): a reason given by a mark" in (
        result.stdout
    )
    assert "(HIERARCH_TESTS_NO_SKIP=1): a reason given from the body" in result.stdout


@pytest.mark.django_db(transaction=True)
def test_threads_and_the_test_use_the_database_at_the_same_moment():
    """On pytest-django's shared in-memory SQLite database this failed at once with
    "database table is locked"; on the test file (WAL, as `make run`'s) writers queue."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            number = 0
            while not stop.is_set() and number < 200:
                number += 1
                Workspace.objects.create(name=f"W{number}", slug=f"w{number}")
        except BaseException as exc:  # reported by the test
            failures.append(exc)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(200):
            list(Workspace.objects.values_list("slug", flat=True))
            Workspace.objects.filter(slug="w1").update(name="First")
            if not writer.is_alive():
                break
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not failures, failures
    assert Workspace.objects.filter(slug__startswith="w").count() >= 1


def imports_of_test_modules(source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, module) for each import of a `test_*` module in `source`, a module of `package`:
    at module level or inside a function, absolute or relative, `import a.test_b`,
    `from a.test_b import c` or `from a import test_b`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = [*package[: len(package) - node.level + 1]] if node.level else []
            module = ".".join([*base, *filter(None, [node.module])])
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if any(part.startswith("test_") for part in name.split(".")):
                found.append((node.lineno, name))
                break
    return sorted(found)


def test_the_rule_sees_a_test_module_imported_in_every_way():
    source = (
        "from tests.runs.test_engine import Driver\n"
        "import tests.api.test_execute\n"
        "from tests.api import test_webhooks\n"
        "from .test_hitl_orm import tool_entity\n"
        "from tests.support.runs import step\n"
        "def test_it():\n"
        "    from tests.test_smoke import ROOT\n"
    )

    assert imports_of_test_modules(source, ("tests", "runs")) == [
        (1, "tests.runs.test_engine"),
        (2, "tests.api.test_execute"),
        (3, "tests.api.test_webhooks"),
        (4, "tests.runs.test_hitl_orm"),
        (7, "tests.test_smoke"),
    ]


def test_no_module_of_the_suite_imports_a_test_module():
    """A helper two test modules share lives in tests/support/ (the house style), not in one
    of them, where the other's import ties the two modules' edits together."""
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in imports_of_test_modules(
            path.read_text(), path.relative_to(ROOT).with_suffix("").parts[:-1]
        )
    ]

    assert found == [], "\n".join(["move these helpers to tests/support/:", *found])
