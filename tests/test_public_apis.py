"""Hierarch reaches libraries through their public APIs only (issue 17).

A private attribute of psycopg, Django, litellm or `re` works until the library's next release:
it is what pinned Hierarch to Python 3.11, psycopg 3.3 and litellm 1.102. This reads the source
of every app (and the benchmarks) and fails on any import of a private module or name of
another package, and on any use of an underscored attribute that Hierarch does not define
itself (so it must belong to a library), with the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "config",
    "entities",
    "runs",
    "approvals",
    "tools",
    "governance",
    "dashboard",
    "designer",
    "bench",
)
FIRST_PARTY = {*APPS, "tests"}

# Underscored names the libraries document for use.
DOCUMENTED = {
    "_meta",  # Django's Model _meta API
    "_default_manager",  # Django: Model._default_manager
    "_base_manager",
    "_state",  # Django: Model._state (adding, db)
    "_replace",  # namedtuple
    "_asdict",
    "_fields",
    "_missing_",  # enum
    "_value_",
    "_name_",
    "_generate_next_value_",
    # drf-spectacular's documented way for an OpenApiSerializerExtension to start from the
    # usual mapping ("bypass_extensions=True", its customization guide).
    "_map_serializer",
}


def _sources() -> list[Path]:
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    )


def _defined_here(trees: list[ast.Module]) -> set[str]:
    """Every name Hierarch defines: functions, classes, attributes it assigns, arguments."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg | ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.isidentifier()  # __slots__, getattr/setattr names
            ):
                names.add(node.value)
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _reaches_into(path: Path, tree: ast.Module, ours: set[str]) -> list[str]:
    found = []
    where = f"{path.relative_to(ROOT)}"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FIRST_PARTY or node.module == "__future__":
                continue
            if any(_private(part) for part in node.module.split(".")) or any(
                _private(alias.name) for alias in node.names
            ):
                names = ", ".join(alias.name for alias in node.names)
                found.append(f"{where}:{node.lineno}: from {node.module} import {names}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] not in FIRST_PARTY and any(_private(part) for part in parts):
                    found.append(f"{where}:{node.lineno}: import {alias.name}")
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in ours | DOCUMENTED
        ):
            found.append(f"{where}:{node.lineno}: .{node.attr}")
    return found


def test_no_source_reaches_into_a_librarys_private_names():
    paths = _sources()
    trees = [ast.parse(path.read_text(), filename=str(path)) for path in paths]
    tests = [ast.parse(p.read_text()) for p in sorted((ROOT / "tests").rglob("*.py"))]
    ours = _defined_here(trees + tests)
    found = [
        hit
        for path, tree in zip(paths, trees, strict=True)
        for hit in _reaches_into(path, tree, ours)
    ]
    assert not found, "private names of libraries used:\n" + "\n".join(found)


def test_the_check_sees_a_private_import_and_attribute(tmp_path):
    source = "import re._parser\nfrom psycopg import _tpc\nx = conn._pipeline\n"
    tree = ast.parse(source)
    found = _reaches_into(ROOT / "runs" / "example.py", tree, ours=set())
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "import re._parser",
        "from psycopg import _tpc",
        "._pipeline",
    ]
