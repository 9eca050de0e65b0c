"""Named validation rules for io_contract inputs (seed 000 §3.8).

A rule names a validator registered here by name (never an import path from user input), or
gives a regular expression, matched with RE2 (`patterns.py`) in linear time. Parameters come
from the rule's own sentence, as the seed writes them: "job_description must be at least 100
characters" with `length_validator`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from runs.engine import patterns, schemas
from runs.engine.definition import Definition

Validator = Callable[[str, dict[str, Any]], str | None]
VALIDATORS: dict[str, Validator] = {}

_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def validator(name: str) -> Callable[[Validator], Validator]:
    def register(function: Validator) -> Validator:
        VALIDATORS[name] = function
        return function

    return register


def _field(rule: str, data: dict[str, Any]) -> tuple[str | None, Any]:
    match = _FIELD.match(rule)
    if not match:
        return None, None
    name = match.group(1)
    value: Any = data
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return name, None
        value = value[part]
    return name, value


@validator("length_validator")
def length_validator(rule: str, data: dict[str, Any]) -> str | None:
    name, value = _field(rule, data)
    if name is None or value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    least = re.search(r"at least (\d+)", rule)
    most = re.search(r"at most (\d+)", rule)
    if least and len(text) < int(least.group(1)):
        return f"{rule} (it has {len(text)})"
    if most and len(text) > int(most.group(1)):
        return f"{rule} (it has {len(text)})"
    return None


@validator("email_validator")
def email_validator(rule: str, data: dict[str, Any]) -> str | None:
    name, value = _field(rule, data)
    if value is not None and not _EMAIL.match(str(value)):
        return f"{rule} ({name} is {value!r})"
    return None


@validator("non_empty")
def non_empty(rule: str, data: dict[str, Any]) -> str | None:
    name, value = _field(rule, data)
    if name is not None and (value is None or value == "" or value == [] or value == {}):
        return f"{rule} ({name} is empty)"
    return None


def rule_problems(rules: list[dict[str, Any]], data: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for rule in rules:
        check = VALIDATORS.get(rule["validator"])
        if check is not None:
            problem = check(rule["rule"], data)
        else:
            name, value = _field(rule["rule"], data)
            try:
                pattern = patterns.compile_pattern(rule["validator"])
            except patterns.PatternRefused as exc:
                problems.append(
                    f"{rule['rule']}: unknown validator {rule['validator']!r} (as a pattern, "
                    f"{exc.reason})"
                )
                continue
            problem = None
            if value is not None and not pattern.search(str(value)):
                problem = f"{rule['rule']} ({name} does not match {rule['validator']})"
        if problem:
            problems.append(problem)
    return problems


def schema_problems(schema: dict[str, Any], value: Any) -> list[str]:
    """What `value` breaks of `schema`, a part of a pinned definition."""
    quick = schemas.quick_check(schema)
    if quick is not None and quick(value):
        return []
    validator = schemas.validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(input)"
        problems.append(f"{where}: {error.message}")
    return problems


def input_problems(definition: Definition, run_input: Any) -> list[str]:
    """io_contract input validation: the schema, then the named validation rules."""
    if not isinstance(run_input, dict):
        return ["the input must be a JSON object"]
    problems = schema_problems(definition["io_contract"]["input"]["schema"], run_input)
    if problems:
        return problems
    return rule_problems(definition["io_contract"]["input"]["validation_rules"], run_input)
