"""template_render: Jinja2 in its sandbox, strict about undefined names."""

from __future__ import annotations

import pytest

from runs.engine.ports import VALIDATION_ERROR, ToolError
from tests.tools.conftest import context_for
from tools.builtin import template_render

pytestmark = pytest.mark.smoke


def render(template: str, **variables) -> str:
    arguments = {"template": template, "variables": variables}
    return template_render.run(arguments, context_for("template_render"))["text"]


def failure(template: str, **variables) -> ToolError:
    with pytest.raises(ToolError) as caught:
        render(template, **variables)
    assert caught.value.permanent
    return caught.value


def test_it_renders_variables_loops_and_filters():
    text = render(
        "Join {{ company }} as {{ title | lower }}:\n{% for p in points %}- {{ p }}\n{% endfor %}",
        company="Acme",
        title="Data Analyst",
        points=["Remote work", "Learning budget"],
    )
    assert text == "Join Acme as data analyst:\n- Remote work\n- Learning budget\n"


def test_it_does_not_escape_html_since_the_output_is_text():
    assert render("{{ s }}", s="<b>R&D</b>") == "<b>R&D</b>"


def test_variables_are_optional():
    arguments = {"template": "static text"}
    assert template_render.run(arguments, context_for("template_render")) == {"text": "static text"}


def test_an_undefined_variable_is_an_error_not_an_empty_string():
    assert str(failure("Hello {{ nmae }}", name="Ada")) == "template error: 'nmae' is undefined"


def test_a_syntax_error_names_the_line():
    error = failure("line one\n{% for x in %}{% endfor %}")
    assert str(error).startswith("template error: line 2: Expected an expression")


def test_the_sandbox_refuses_python_internals():
    error = failure("{{ ''.__class__.__mro__ }}")
    assert "access to attribute '__class__' of 'str' object is unsafe" in str(error)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ 'x' * 10000000 }}", "repeating a value"),
        ("{{ 9 ** 99999999 }}", "an exponent above 1000 is not allowed"),
        ("{% for i in range(2000) %}{{ 'y' * 1000 }}{% endfor %}", "longer than 1000000"),
    ],
    ids=["repeat", "power", "long-output"],
)
def test_a_render_cannot_build_a_huge_value(template, message):
    assert message in str(failure(template))


def test_an_error_while_rendering_is_permanent_and_named():
    assert str(failure("{{ 1 / n }}", n=0)) == "template error: ZeroDivisionError: division by zero"


def test_includes_are_not_available():
    assert "no loader" in str(failure("{% include 'other.txt' %}"))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments.template: is required"),
        ({"template": 3}, "arguments.template: must be a string, not a number"),
        ({"template": "x", "variables": []}, "arguments.variables: must be an object, not a list"),
    ],
    ids=["missing", "not-text", "variables-not-an-object"],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ToolError) as caught:
        template_render.run(arguments, context_for("template_render"))
    assert caught.value.code == VALIDATION_ERROR
    assert message in str(caught.value)


def test_its_sandbox_is_the_real_thing_since_it_has_no_effect():
    arguments = {"template": "Hi {{ who }}", "variables": {"who": "Ada"}}
    assert template_render.sandbox(arguments, context_for("template_render")) == {"text": "Hi Ada"}
