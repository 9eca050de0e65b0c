"""An entity definition in the seed's exchange format: defaults, normalisation, local checks.

A definition is the JSON of seed 000 §2.1: the sections metadata, identity (with persona),
hierarchy, logic_gate, planning, capabilities, governance, io_contract, observability and
metadata_extensions. `normalize` fills every omitted field from the section schemas in
`entities/schemas/`, turns the seed's idioms into standard forms (property-level
`"required": true`, JSONLogic written as text), and returns every problem it finds, each with
the path of the field and a sentence a designer understands. Checks that need the rest of the
workspace (references, cycles, depth, budgets) live in `entities/validation.py`.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError

from config.json_input import json_input_problems
from runs.engine import jsonlogic, patterns, schemas, versions

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

SECTIONS = (
    "metadata",
    "identity",
    "hierarchy",
    "logic_gate",
    "planning",
    "capabilities",
    "governance",
    "io_contract",
    "observability",
    "metadata_extensions",
)

# A FUNCTION validator names a function registered in code; never an import path.
FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# `metadata_extensions.ui_hints.form_layout`: how the forms that ask for a run's input (the
# console's start form, the designer's "Try it") lay out its fields (runs/input_wizard.py).
# null is "single".
FORM_LAYOUTS = {
    "single": "one form with every field",
    "wizard": "a page per field (or per group of fields), then a review before starting",
}
# `ui_hints.visibility`: every entity is seen by its workspace's members, and no one else.
VISIBILITY = "WORKSPACE"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a definition: where, and what to do about it."""

    path: str
    message: str
    entity: str = ""

    def __str__(self) -> str:
        parts = [part for part in (self.entity, self.path) if part]
        return ": ".join([*parts, self.message])

    def as_dict(self) -> dict[str, str]:
        data = {"path": self.path, "message": self.message}
        if self.entity:
            data["entity"] = self.entity
        return data


class DefinitionInvalid(Exception):
    """Raised by the services with every problem found; nothing was saved."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def join_path(*parts: str | int) -> str:
    """`join_path("planning", "steps", 2, "name")` → `planning.steps[2].name`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "":
            out += f".{part}" if out else part
    return out


def _with_defaults(validator_class: type) -> type:
    """A validator that fills each property's `default` before validating it (jsonschema FAQ)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema) -> Iterator[ValidationError]:
        if validator.is_type(instance, "object"):
            for name, subschema in properties.items():
                if isinstance(subschema, dict) and "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


_DefaultingValidator = _with_defaults(Draft202012Validator)


@cache
def section_schemas() -> dict[str, dict]:
    """The JSON Schema of each section (tool items inlined into capabilities)."""
    schemas = {name: _load(name) for name in SECTIONS}
    schemas["capabilities"]["properties"]["tools"]["items"] = tool_schema()
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)
    return schemas


@cache
def tool_schema() -> dict:
    return _load("tool")


def _load(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.json").read_text())


@cache
def _section_validators() -> dict[str, Any]:
    return {name: _DefaultingValidator(schema) for name, schema in section_schemas().items()}


@cache
def _tool_validator() -> Any:
    return _DefaultingValidator(tool_schema())


def section_defaults(section: str) -> dict:
    """The full default value of a section (what an omitted section becomes)."""
    value: dict = {}
    if section == "identity":
        value = {"name": "placeholder"}
    if section == "metadata":
        value = {"type": "ACTION"}
    list(_section_validators()[section].iter_errors(value))
    if section == "identity":
        value.pop("name")
    if section == "metadata":
        value.pop("type")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_TYPE_WORDS = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def humanize(error: ValidationError, base: tuple[str | int, ...]) -> list[Problem]:
    """Turn one jsonschema error into problems with a field path and a plain sentence."""
    path = join_path(*base, *error.absolute_path)
    kind = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    instance = error.instance
    if "x-error" in schema and kind in {"pattern", "oneOf", "anyOf", "enum"}:
        return [Problem(path, f"{schema['x-error']} (got {instance!r})")]
    if kind == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        extras = [k for k in instance if k not in schema.get("properties", {})]
        problems = []
        for key in extras:
            hint = difflib.get_close_matches(key, known, n=1)
            suggestion = (
                f"; did you mean {hint[0]!r}?" if hint else f"; known fields: {', '.join(known)}"
            )
            problems.append(Problem(join_path(path, key), f"is not a known field{suggestion}"))
        return problems
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [Problem(join_path(path, missing), "is required")]
    if kind == "enum":
        options = ", ".join(str(o) for o in error.validator_value)
        return [Problem(path, f"{instance!r} is not allowed; use one of: {options}")]
    if kind == "type":
        wanted = error.validator_value
        wanted = wanted if isinstance(wanted, list) else [wanted]
        words = " or ".join(_TYPE_WORDS.get(w, w) for w in wanted)
        return [Problem(path, f"must be {words}, not {_json_type(instance)}")]
    if kind == "minLength" and error.validator_value == 1:
        return [Problem(path, "must not be empty")]
    if kind == "maxLength":
        return [
            Problem(
                path,
                f"is too long: at most {error.validator_value} characters (it has {len(instance)})",
            )
        ]
    if kind == "maxItems":
        return [Problem(path, f"has {len(instance)} items; at most {error.validator_value}")]
    if kind in {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}:
        word = {
            "minimum": "at least",
            "exclusiveMinimum": "more than",
            "maximum": "at most",
            "exclusiveMaximum": "less than",
        }[kind]
        return [Problem(path, f"must be {word} {error.validator_value} (got {instance!r})")]
    if kind == "uniqueItems":
        return [Problem(path, "lists the same item twice")]
    if kind == "pattern":
        return [Problem(path, f"{instance!r} does not match the pattern {error.validator_value}")]
    if kind == "oneOf":
        return [Problem(path, f"{instance!r} is not in any allowed form")]
    return [Problem(path, error.message)]


def schema_problems(validator: Any, value: Any, base: tuple[str | int, ...]) -> list[Problem]:
    problems: list[Problem] = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path))):
        problems.extend(humanize(error, base))
    return problems


def normalize_required(schema: Any) -> Any:
    """Rewrite the seed's property-level `"required": true` as a standard `required` list."""
    if not isinstance(schema, dict):
        return schema
    properties = schema.get("properties")
    if isinstance(properties, dict):
        required = (
            list(schema.get("required", [])) if isinstance(schema.get("required"), list) else []
        )
        for name, prop in properties.items():
            flag = prop.get("required") if isinstance(prop, dict) else None
            if isinstance(flag, bool):
                del prop["required"]
                if flag and name not in required:
                    required.append(name)
            normalize_required(prop)
        if required:
            schema["required"] = required
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        if isinstance(schema.get(key), dict):
            normalize_required(schema[key])
    for key in ("allOf", "anyOf", "oneOf", "prefixItems"):
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                normalize_required(sub)
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                normalize_required(sub)
    return schema


def check_json_schema(schema: Any, path: str) -> list[Problem]:
    """A user's JSON Schema at `path`: its patterns must run on RE2 and its references
    resolve inside it (runs/engine/schemas.py), then it must be a valid Draft 2020-12 schema."""
    if not isinstance(schema, dict):
        return [Problem(path, f"must be a JSON Schema object, not {_json_type(schema)}")]
    unsafe = [
        Problem(join_path(path, *where), message)
        for where, message in schemas.design_problems(schema)
    ]
    if unsafe:
        return unsafe
    try:
        schemas.check_schema(schema)
    except SchemaError as exc:
        where = join_path(path, *exc.absolute_path) if exc.absolute_path else path
        return [Problem(where, f"is not a valid JSON Schema: {exc.message}")]
    return []


def normalize_tool(tool: Any, base: tuple[str | int, ...] = ()) -> tuple[Any, list[Problem]]:
    """Defaults and checks for one tool definition (registry or inline in an entity)."""
    if not isinstance(tool, dict):
        return tool, [Problem(join_path(*base), f"must be an object, not {_json_type(tool)}")]
    tool = copy.deepcopy(tool)
    parameters = (
        tool.get("function_schema", {}).get("parameters")
        if isinstance(tool.get("function_schema"), dict)
        else None
    )
    normalize_required(parameters)
    problems = schema_problems(_tool_validator(), tool, base)
    if not problems:
        problems += check_json_schema(
            tool["function_schema"]["parameters"],
            join_path(*base, "function_schema", "parameters"),
        )
        if tool.get("output_schema") is not None:
            problems += check_json_schema(tool["output_schema"], join_path(*base, "output_schema"))
    return tool, problems


def is_tool_reference(tool: dict) -> bool:
    """An item with only a tool_id refers to the registry instead of defining the tool."""
    return set(tool) == {"tool_id"}


def normalize(definition: Any) -> tuple[dict, list[Problem]]:
    """Return the definition with defaults filled and idioms normalised, and its problems."""
    if not isinstance(definition, dict):
        return {}, [
            Problem(
                "",
                "a definition must be a JSON object with the sections "
                + ", ".join(SECTIONS)
                + f"; got {_json_type(definition)}",
            )
        ]
    # First, what nothing further may walk or store: too deep a nesting (every check below
    # recurses), text PostgreSQL refuses, infinite numbers.
    unreadable = json_input_problems(definition)
    if unreadable:
        return {}, [Problem(where, message) for where, message in unreadable.items()]
    problems: list[Problem] = []
    for key in definition:
        if key not in SECTIONS:
            hint = difflib.get_close_matches(str(key), SECTIONS, n=1)
            suffix = f"; did you mean {hint[0]!r}?" if hint else ""
            problems.append(Problem(str(key), f"is not a section of an entity definition{suffix}"))

    result: dict[str, Any] = {}
    valid_sections: set[str] = set()
    for section in SECTIONS:
        value = definition.get(section)
        if value is None:
            value = {}
        whole = isinstance(value, dict)
        if not whole:
            problems.append(
                Problem(section, f"must be an object (a section), not {_json_type(value)}")
            )
            # Its defaults stand in, so the checks of the workspace that still run on a
            # refused definition meet every section (they answer problems, not a 500).
            value = {}
        value = copy.deepcopy(value)
        _normalize_seed_idioms(section, value)
        found = schema_problems(_section_validators()[section], value, (section,))
        if section == "capabilities":
            found += _tool_item_problems(value)
        if whole:
            problems += found
        result[section] = value
        if whole and not found:
            valid_sections.add(section)

    problems += _semantic_problems(result, valid_sections)
    return result, problems


def _normalize_seed_idioms(section: str, value: dict) -> None:
    if section == "io_contract":
        for part in ("input", "output"):
            if isinstance(value.get(part), dict):
                normalize_required(value[part].get("schema"))
    elif section == "governance":
        rails = value.get("safety_rails")
        if isinstance(rails, dict) and isinstance(rails.get("output_validation"), dict):
            normalize_required(rails["output_validation"].get("schema"))
    elif section == "capabilities":
        for tool in value.get("tools") or []:
            if isinstance(tool, dict) and isinstance(tool.get("function_schema"), dict):
                normalize_required(tool["function_schema"].get("parameters"))
    elif section == "metadata" and isinstance(value.get("tags"), list):
        seen: list[Any] = []
        for tag in value["tags"]:
            if tag not in seen:
                seen.append(tag)
        value["tags"] = seen


def _tool_item_problems(capabilities: dict) -> list[Problem]:
    problems: list[Problem] = []
    tools = capabilities.get("tools")
    if not isinstance(tools, list):
        return problems
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or "tool_id" not in tool:
            continue
        tool_id = tool["tool_id"]
        if tool_id in seen:
            problems.append(
                Problem(
                    join_path("capabilities", "tools", index, "tool_id"),
                    f"tool {tool_id!r} is listed twice (also at tools[{seen[tool_id]}])",
                )
            )
        seen[tool_id] = index
        if not is_tool_reference(tool):
            if "name" not in tool:
                problems.append(
                    Problem(
                        join_path("capabilities", "tools", index, "name"),
                        "is required when a tool is defined here (give only tool_id to use "
                        "a tool of the workspace's registry)",
                    )
                )
            elif isinstance(tool.get("function_schema"), dict):
                problems += check_json_schema(
                    tool["function_schema"].get("parameters"),
                    join_path("capabilities", "tools", index, "function_schema", "parameters"),
                )
            if isinstance(tool.get("output_schema"), dict):
                problems += check_json_schema(
                    tool["output_schema"],
                    join_path("capabilities", "tools", index, "output_schema"),
                )
    return problems


def _parse_expression(container: dict, key: str, path: str, problems: list[Problem]) -> None:
    """Decode a JSONLogic expression in place and report what is wrong with it."""
    raw = container.get(key)
    if raw is None:
        return
    try:
        parsed = jsonlogic.parse(raw)
    except jsonlogic.ExpressionError as exc:
        problems.append(Problem(path, f"is not JSONLogic: it {exc}"))
        return
    container[key] = parsed
    for message in jsonlogic.problems(parsed):
        problems.append(Problem(path, f"is not valid JSONLogic: it {message}"))


def _semantic_problems(d: dict, valid: set[str]) -> list[Problem]:
    """Rules a schema cannot say: conditional requirements, expressions, plan coherence."""
    problems: list[Problem] = []
    entity_type = d.get("metadata", {}).get("type") if "metadata" in valid else None
    if "identity" in valid:
        problems += _identity_problems(d["identity"], entity_type)
    if "hierarchy" in valid:
        problems += _hierarchy_problems(d["hierarchy"])
    if "logic_gate" in valid:
        problems += _review_problems(d["logic_gate"]["review_mechanism"])
    if "planning" in valid:
        problems += _plan_problems(d["planning"])
    if "capabilities" in valid:
        problems += _memory_problems(d["capabilities"]["memory"])
    if "governance" in valid:
        problems += _governance_problems(d["governance"])
    if "io_contract" in valid:
        problems += _io_contract_problems(d["io_contract"])
    if "observability" in valid:
        problems += _custom_metric_problems(d["observability"]["metrics"]["custom_metrics"])
    if "metadata_extensions" in valid:
        problems += _ui_hint_problems(d["metadata_extensions"]["ui_hints"])
    return problems


def _ui_hint_problems(ui_hints: dict) -> list[Problem]:
    """Every UI hint acts or is refused: a layout the forms do not have, or a visibility
    other than the workspace's, would be kept and silently do nothing."""
    problems: list[Problem] = []
    base = "metadata_extensions.ui_hints"
    layout = ui_hints["form_layout"]
    if layout is not None and layout not in FORM_LAYOUTS:
        known = "; ".join(f"{name!r} ({what})" for name, what in FORM_LAYOUTS.items())
        problems.append(
            Problem(
                f"{base}.form_layout",
                f"{layout!r} is not a form layout; use {known}, or null for the single form",
            )
        )
    visibility = ui_hints["visibility"]
    if visibility != VISIBILITY:
        problems.append(
            Problem(
                f"{base}.visibility",
                f"{visibility} is not supported yet: every entity is visible to all the members "
                f"of its workspace and to no one else; use {VISIBILITY}",
            )
        )
    return problems


def _custom_metric_problems(custom_metrics: list[dict]) -> list[Problem]:
    """Each custom metric is one row per run under its name: a name declared twice would
    record one number under two aggregations."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, metric in enumerate(custom_metrics):
        name = metric["metric_name"]
        if name in seen:
            problems.append(
                Problem(
                    join_path("observability", "metrics", "custom_metrics", index, "metric_name"),
                    f"{name!r} is declared twice; give each custom metric its own name",
                )
            )
        seen.add(name)
    return problems


def _identity_problems(identity: dict, entity_type: str | None) -> list[Problem]:
    problems: list[Problem] = []
    if not identity["description"].strip():
        problems.append(
            Problem("identity.description", "is required: say in a sentence what it does")
        )
    if entity_type in {"AGENT", "PROCESS"} and not identity["persona"]["system_prompt"].strip():
        problems.append(
            Problem(
                "identity.persona.system_prompt",
                f"is required for an {entity_type}: it defines the role, tone and "
                "constraints the model works under",
            )
        )
    for index, constraint in enumerate(identity["persona"]["behavioral_constraints"]):
        if isinstance(constraint, dict):
            _parse_expression(
                constraint,
                "rule",
                f"identity.persona.behavioral_constraints[{index}].rule",
                problems,
            )
    return problems


def _hierarchy_problems(hierarchy: dict) -> list[Problem]:
    problems: list[Problem] = []
    for index, link in enumerate(hierarchy["children"]):
        path = f"hierarchy.children[{index}].condition"
        condition = link["condition"]
        _parse_expression(condition, "expression", f"{path}.expression", problems)
        incomplete = not condition["enabled"] or condition["expression"] in (None, "")
        if link["relationship"] == "CONDITIONAL" and incomplete:
            problems.append(
                Problem(
                    path,
                    "a CONDITIONAL child needs condition.enabled: true and a JSONLogic "
                    "condition.expression",
                )
            )
        if link.get("version") is not None:
            wrong = versions.range_problem(link["version"])
            if wrong:
                problems.append(
                    Problem(
                        f"hierarchy.children[{index}].version",
                        f"the link to {link['child_id']!r}: {wrong}",
                    )
                )
    return problems


def _memory_problems(memory: dict) -> list[Problem]:
    problems: list[Problem] = []
    if memory["enabled"] and memory["access_pattern"] == "SEMANTIC_SEARCH":
        problems.append(
            Problem(
                "capabilities.memory.access_pattern",
                "SEMANTIC_SEARCH is not supported yet; use FULL or RECENT_N",
            )
        )
    if memory["enabled"] and memory["storage_backend"] in ("VECTOR_DB", "REDIS"):
        problems.append(
            Problem(
                "capabilities.memory.storage_backend",
                f"{memory['storage_backend']} is not supported yet: memory is kept in the "
                "database; use POSTGRES_JSONB",
            )
        )
    retention = memory["retention_policy"]
    fold, cap = retention["summarization_threshold"], retention["max_items"]
    if fold is not None and cap is not None and cap < fold:
        problems.append(
            Problem(
                "capabilities.memory.retention_policy.summarization_threshold",
                f"is {fold} but max_items keeps only {cap}: the oldest items would be dropped "
                "before there are enough to summarise; make it at most max_items, or null",
            )
        )
    return problems


def _governance_problems(governance: dict) -> list[Problem]:
    problems: list[Problem] = []
    costs = governance["cost_controls"]
    if (
        costs["max_cost_usd"] is not None
        and costs["alert_threshold_usd"] is not None
        and costs["alert_threshold_usd"] > costs["max_cost_usd"]
    ):
        problems.append(
            Problem(
                "governance.cost_controls.alert_threshold_usd",
                f"${costs['alert_threshold_usd']} is above max_cost_usd "
                f"(${costs['max_cost_usd']}), so the run would stop before the alert fires",
            )
        )
    for index, checkpoint in enumerate(governance["human_oversight"]["hitl_checkpoints"]):
        path = f"governance.human_oversight.hitl_checkpoints[{index}].condition"
        _parse_expression(checkpoint, "condition", path, problems)
        if checkpoint["trigger"] == "CUSTOM_CONDITION" and checkpoint["condition"] is None:
            problems.append(
                Problem(path, "is required for a CUSTOM_CONDITION checkpoint (JSONLogic)")
            )
    validation = governance["safety_rails"]["output_validation"]
    if validation["schema"] is not None:
        problems += check_json_schema(
            validation["schema"], "governance.safety_rails.output_validation.schema"
        )
    elif validation["enabled"]:
        problems.append(
            Problem(
                "governance.safety_rails.output_validation.schema",
                "is required when output_validation is enabled",
            )
        )
    return problems


def _io_contract_problems(io_contract: dict) -> list[Problem]:
    problems: list[Problem] = []
    for part in ("input", "output"):
        path = f"io_contract.{part}.schema"
        schema = io_contract[part]["schema"]
        found = check_json_schema(schema, path)
        problems += found
        if not found and schema.get("type", "object") != "object":
            problems.append(
                Problem(
                    f"{path}.type",
                    f'must be "object": an entity\'s {part} is a JSON object of named fields',
                )
            )
    for index, rule in enumerate(io_contract["input"]["validation_rules"]):
        validator = rule["validator"]
        if not FUNCTION_NAME.match(validator):
            reason = patterns.pattern_problem(validator)
            if reason:
                problems.append(
                    Problem(
                        f"io_contract.input.validation_rules[{index}].validator",
                        f"is neither a validator name nor a usable regex: {reason}",
                    )
                )
    return problems


def _review_problems(review: dict) -> list[Problem]:
    problems: list[Problem] = []
    base = "logic_gate.review_mechanism"
    prompt = review["review_prompt"] or ""
    if prompt and "{output}" not in prompt:
        problems.append(Problem(f"{base}.review_prompt", "must contain the {output} placeholder"))
    if review["enabled"] and not review["success_criteria"]:
        problems.append(
            Problem(f"{base}.success_criteria", "review is enabled but lists no success criteria")
        )
    for index, criterion in enumerate(review["success_criteria"]):
        path = f"{base}.success_criteria[{index}].validator"
        kind = criterion["validation_type"]
        validator = criterion.get("validator")
        if kind == "LLM_JUDGE":
            if not prompt:
                problems.append(
                    Problem(
                        f"{base}.review_prompt",
                        "is required by the LLM_JUDGE criterion "
                        f"{criterion['criterion']!r}; include the {{output}} placeholder",
                    )
                )
            continue
        if validator in (None, ""):
            problems.append(Problem(path, f"is required for a {kind} criterion"))
            continue
        if kind == "REGEX":
            if not isinstance(validator, str):
                problems.append(Problem(path, "must be a regular expression string"))
                continue
            reason = patterns.pattern_problem(validator)
            if reason:
                problems.append(Problem(path, f"cannot be used as a regular expression: {reason}"))
        elif kind == "SCHEMA":
            schema = validator
            if isinstance(validator, str):
                try:
                    schema = json.loads(validator)
                except json.JSONDecodeError as exc:
                    problems.append(Problem(path, f"is not valid JSON ({exc.msg})"))
                    continue
            problems += check_json_schema(schema, path)
        elif kind == "FUNCTION" and (
            not isinstance(validator, str) or not FUNCTION_NAME.match(validator)
        ):
            problems.append(
                Problem(
                    path,
                    "must be the name of a registered function (letters, digits and '_'), "
                    "not an import path or code",
                )
            )
    return problems


def _plan_problems(planning: dict) -> list[Problem]:
    problems: list[Problem] = []
    plan = planning["static_plan"]
    steps = plan["steps"]
    base = "planning.static_plan"
    if plan["enabled"] and not steps:
        problems.append(Problem(f"{base}.steps", "the static plan is enabled but has no steps"))
    if plan["fallback_behavior"] == "DYNAMIC_ONLY" and not planning["dynamic_planning"]["enabled"]:
        problems.append(
            Problem(
                f"{base}.fallback_behavior",
                "DYNAMIC_ONLY needs planning.dynamic_planning.enabled: true",
            )
        )
    orders: dict[int, int] = {}
    step_ids: dict[str, int] = {}
    for index, step in enumerate(steps):
        path = f"{base}.steps[{index}]"
        step.setdefault("step_id", f"step-{step['order']}")
        if step["order"] in orders:
            problems.append(
                Problem(
                    f"{path}.order",
                    f"order {step['order']} is also used by steps[{orders[step['order']]}]",
                )
            )
        orders.setdefault(step["order"], index)
        if step["step_id"] in step_ids:
            problems.append(
                Problem(
                    f"{path}.step_id",
                    f"{step['step_id']!r} is also used by steps[{step_ids[step['step_id']]}]",
                )
            )
        step_ids.setdefault(step["step_id"], index)
        problems += _step_target_problems(step, path)
        for c_index, exit_condition in enumerate(step["exit_conditions"]):
            _parse_expression(
                exit_condition,
                "condition",
                f"{path}.exit_conditions[{c_index}].condition",
                problems,
            )
    problems += _next_step_problems(steps, orders, base)
    problems += _jump_back_problems(steps, orders, base, planning["loop_control"])
    return problems


def _step_target_problems(step: dict, path: str) -> list[Problem]:
    """A step's target names what its type invokes, and nothing else."""
    problems: list[Problem] = []
    target = step["target"]
    if step["type"] == "CHILD_ENTITY_INVOCATION" and not target["entity_id"]:
        problems.append(
            Problem(f"{path}.target.entity_id", "is required for a CHILD_ENTITY_INVOCATION step")
        )
    if step["type"] == "TOOL_CALL" and not target["tool_id"]:
        problems.append(Problem(f"{path}.target.tool_id", "is required for a TOOL_CALL step"))
    if step["type"] == "DELEGATE":
        if not target["entity_id"]:
            problems.append(
                Problem(
                    f"{path}.target.entity_id",
                    "is required for a DELEGATE step: the delegation template it hires from",
                )
            )
        if not target.get("hire"):
            problems.append(
                Problem(f"{path}.target.hire", "is required for a DELEGATE step: its role and task")
            )
    elif target.get("hire"):
        problems.append(
            Problem(
                f"{path}.target.hire",
                f"is only used by DELEGATE steps; this step is {step['type']}",
            )
        )
    if step["type"] not in ("CHILD_ENTITY_INVOCATION", "DELEGATE") and target["entity_id"]:
        problems.append(
            Problem(
                f"{path}.target.entity_id",
                "is only used by CHILD_ENTITY_INVOCATION and DELEGATE steps; this step is "
                f"{step['type']}",
            )
        )
    if step["type"] != "TOOL_CALL" and target["tool_id"]:
        problems.append(
            Problem(
                f"{path}.target.tool_id",
                f"is only used by TOOL_CALL steps; this step is {step['type']}",
            )
        )
    return problems


def _jump_back_problems(
    steps: list[dict], orders: dict[int, int], base: str, loop_control: dict
) -> list[Problem]:
    """A jump back (to an earlier step, or the same one) starts the next pass of the plan, so
    the loop must allow more than one pass; and a jump back whose condition cannot change
    (it reads nothing: no `var`) would go back every time until the passes run out, which
    only makes sense when running out is how the loop means to end (on_exhausted COMPLETE)."""
    problems: list[Problem] = []
    for index, step in enumerate(steps):
        for c_index, exit_condition in enumerate(step["exit_conditions"]):
            target = exit_condition["next_step"]
            if not isinstance(target, int) or orders.get(target, len(steps)) > index:
                continue
            path = f"{base}.steps[{index}].exit_conditions[{c_index}]"
            to = f"step {target}" if target != step["order"] else "itself"
            if loop_control.get("max_iterations") == 1:
                problems.append(
                    Problem(
                        f"{path}.next_step",
                        f"jumps back to {to}, but planning.loop_control.max_iterations is 1: "
                        "each jump back starts another pass of the plan, so raise it (or leave "
                        "it empty for the global limit)",
                    )
                )
            elif not _reads_anything(exit_condition["condition"]) and (
                loop_control.get("on_exhausted", "BLOCK") != "COMPLETE"
            ):
                problems.append(
                    Problem(
                        f"{path}.condition",
                        f"jumps back to {to} whatever happens (the condition reads nothing that "
                        "changes), so every run ends out of passes; make it depend on the "
                        "state or the iteration, or set planning.loop_control.on_exhausted to "
                        "COMPLETE",
                    )
                )
    return problems


def _reads_anything(expression: Any) -> bool:
    """Whether a JSONLogic expression reads data (a `var`, `missing` or `missing_some`)."""
    if isinstance(expression, dict):
        return any(
            key in ("var", "missing", "missing_some") or _reads_anything(value)
            for key, value in expression.items()
        )
    if isinstance(expression, list):
        return any(_reads_anything(item) for item in expression)
    return False


def _next_step_problems(steps: list[dict], orders: dict[int, int], base: str) -> list[Problem]:
    """An exit condition's next_step is a step's order (or END or ESCALATE)."""
    problems: list[Problem] = []
    for index, step in enumerate(steps):
        for c_index, exit_condition in enumerate(step["exit_conditions"]):
            target = exit_condition["next_step"]
            if isinstance(target, int) and target not in orders:
                known = ", ".join(str(o) for o in sorted(orders))
                problems.append(
                    Problem(
                        f"{base}.steps[{index}].exit_conditions[{c_index}].next_step",
                        f"there is no step with order {target} (orders: {known}; or use END or "
                        "ESCALATE)",
                    )
                )
    return problems
