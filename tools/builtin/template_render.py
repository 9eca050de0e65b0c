"""template_render: a Jinja2 template rendered with variables, in Jinja's sandbox.

The sandbox refuses attribute access to Python internals; autoescape is off because the
output is text for a model or a message, not HTML; StrictUndefined makes a missing variable
an error instead of an empty string. Pure: its sandbox is the real thing.
"""

from __future__ import annotations

import numbers
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from runs.engine.ports import ToolError
from tools.builtin.base import ToolContext, check_arguments

NAME = "template_render"

# A template is code a designer writes: these bound what one render may produce.
MAX_OUTPUT_CHARS = 1_000_000
MAX_EXPONENT = 1_000

DEFINITION: dict[str, Any] = {
    "tool_id": NAME,
    "name": "Template render",
    "description": "Renders a Jinja2 template with variables (sandboxed, no HTML escaping).",
    "provider": "internal",
    "function_schema": {
        "name": NAME,
        "description": "Render a Jinja2 template, e.g. 'Hello {{ name }}', with variables.",
        "parameters": {
            "type": "object",
            "properties": {
                "template": {
                    "type": "string",
                    "maxLength": 100_000,
                    "description": "Jinja2 template source.",
                },
                "variables": {
                    "type": "object",
                    "description": "Values the template refers to by name.",
                    "default": {},
                },
            },
            "required": ["template"],
            "additionalProperties": False,
        },
    },
    "permissions": "READ",
    "sandbox_mode": False,
    "implementation": NAME,
    "output_schema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
}

PARAMETERS = DEFINITION["function_schema"]["parameters"]


class _Environment(SandboxedEnvironment):
    """Jinja's sandbox, plus limits on `*` and `**`, which can build huge values at once."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if (
            operator == "**"
            and _is_number(right)
            and abs(right) > MAX_EXPONENT
            and _is_number(left)
            and abs(left) not in (0, 1)
        ):
            raise SecurityError(f"an exponent above {MAX_EXPONENT} is not allowed")
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if (
                    isinstance(sequence, str | list | tuple)
                    and isinstance(count, int)
                    and len(sequence) * count > MAX_OUTPUT_CHARS
                ):
                    raise SecurityError(
                        f"repeating a value to more than {MAX_OUTPUT_CHARS} items is not allowed"
                    )
        return super().call_binop(context, operator, left, right)


_ENVIRONMENT = _Environment(autoescape=False, undefined=StrictUndefined)


def run(arguments: dict[str, Any], context: ToolContext) -> dict[str, str]:
    check_arguments(PARAMETERS, arguments, tool_id=context.tool_id)
    template = _compile(arguments["template"])
    variables = arguments.get("variables") or {}
    size = 0
    parts = []
    try:
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise ToolError(
                    f"template error: the output is longer than {MAX_OUTPUT_CHARS} characters",
                    permanent=True,
                )
            parts.append(chunk)
    except ToolError:
        raise
    except TemplateError as exc:
        raise ToolError(f"template error: {_describe(exc)}", permanent=True) from None
    except Exception as exc:
        # Rendering is pure, so anything raised (1/0, "a" + 1) fails again on a retry.
        raise ToolError(
            f"template error: {type(exc).__name__}: {str(exc)[:200]}", permanent=True
        ) from None
    return {"text": "".join(parts)}


def sandbox(arguments: dict[str, Any], context: ToolContext) -> dict[str, str]:
    return run(arguments, context)


@lru_cache(maxsize=256)
def _compile(source: str) -> Any:
    try:
        return _ENVIRONMENT.from_string(source)
    except TemplateError as exc:
        raise ToolError(f"template error: {_describe(exc)}", permanent=True) from None


def _describe(exc: TemplateError) -> str:
    if isinstance(exc, TemplateSyntaxError):
        return f"line {exc.lineno}: {exc.message}"
    return exc.message or type(exc).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)
