"""The static plan: the steps the entity takes, in order, each thinking, calling a child or a
tool, or acting; what each step is given (from the fields available at that point of the
run); and where the run goes next when an exit condition holds.

The plan is kept in step with the children here, when the sections are applied: the plan
section comes after the children's, so `write` sees the children as the designer left them
and compares them with the ones the page was showing. A child added while the plan is on
gets a step that calls it; a child removed takes its steps with it; turning the plan on with
no steps starts it with a step per child.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from django import forms
from django.http import QueryDict

from designer.editor import conditions
from designer.editor.base import EditorContext, RowForm, Rows, Section, deep, read
from designer.editor.children import Known, known_entities, posted_values, row_index
from designer.editor.condition_fields import ConditionFields
from designer.editor.mapping_fields import MappingFields

CHILD, TOOL = "CHILD_ENTITY_INVOCATION", "TOOL_CALL"
STEP_TYPES = [
    ("THOUGHT", "Think (ask the model)"),
    (CHILD, "Call a child"),
    (TOOL, "Call a tool"),
    ("ACTION", "Act"),
]
FALLBACK = [
    ("STRICT", "Follow the plan; a failed step fails the run"),
    ("ADAPTIVE", "Follow the plan, re-planning around a failed step"),
    ("DYNAMIC_ONLY", "Let the model plan instead"),
]
ENDINGS = [("END", "End the run"), ("ESCALATE", "Hand it to a person")]
MOST_STEPS = 100
MOST_EXITS = 5
_EXIT = re.compile(r"^\.exit_conditions\[(\d+)\](?:\.(condition|next_step))?")


class SelectOrKeep(forms.Select):
    """A select that also offers the value it holds when that is not among its choices (a
    child added in this very post, a target the definition names), so showing a form never
    changes what it says."""

    def optgroups(self, name: str, value: list[Any], attrs: Any = None) -> Any:
        offered = {str(v) for v, _label in _flat(self.choices)}
        missing = [v for v in value if v not in (None, "") and str(v) not in offered]
        if missing:
            self.choices = [*self.choices, *((v, v) for v in missing)]
        return super().optgroups(name, value, attrs)


def _flat(choices: Any) -> list[tuple[Any, Any]]:
    flat = []
    for value, label in choices:
        if isinstance(label, list | tuple):
            flat.extend(label)
        else:
            flat.append((value, label))
    return flat


ON_EXHAUSTED = [
    ("BLOCK", "Wait for more passes"),
    ("COMPLETE", "End with the last output"),
    ("FAIL", "Fail the run"),
]


class PlanForm(forms.Form):
    enabled = forms.BooleanField(
        required=False,
        label="Follow a plan of fixed steps",
        help_text="Off: each child is called in order (or the model answers, if there are none).",
    )
    fallback_behavior = forms.ChoiceField(choices=FALLBACK, label="When a step fails")
    max_iterations = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=100_000,
        label="Passes at most",
        help_text="How many times the plan may run: a step's exit that goes back to an "
        "earlier step starts another pass. Empty: as many as the server allows.",
    )
    on_exhausted = forms.ChoiceField(
        choices=ON_EXHAUSTED,
        label="When the passes run out",
        help_text="Before the loop is done (a step still going back, or its goals unmet). "
        "Waiting: a person gives the run more passes on its trace page.",
    )


class StepForm(RowForm):
    paths: ClassVar[dict[str, str]] = {
        ".name": "name",
        ".description": "description",
        ".type": "type",
        ".target.entity_id": "target",
        ".target.tool_id": "target",
        ".target.prompt_template": "prompt_template",
        ".target": "target",
        ".required": "required",
    }

    name = forms.CharField(max_length=200)
    description = forms.CharField(
        required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )
    type = forms.ChoiceField(choices=STEP_TYPES, label="Does")
    target = forms.CharField(
        required=False,
        max_length=300,
        label="Calls",
        help_text="For a step that calls a child or a tool.",
    )
    prompt_template = forms.CharField(
        required=False,
        label="Prompt",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="{name} is replaced by that field of the run.",
    )
    required = forms.BooleanField(required=False, initial=True, label="Required")
    step_id = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    order = forms.IntegerField(
        required=False, min_value=1, max_value=100_000, widget=forms.HiddenInput
    )

    def __init__(
        self,
        *args: Any,
        targets: list[tuple[str, list[tuple[str, str]]]] | None = None,
        target_fields: dict[str, list[str]] | None = None,
        outputs: dict[str, Any] | None = None,
        names: list[tuple[str, str]] | None = None,
        base_paths: list[str] | None = None,
        next_choices: list[tuple[str, str]] | None = None,
        steps: list[dict] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        index = row_index(self.prefix)
        self.fields["target"].widget = SelectOrKeep(choices=[("", "—"), *(targets or [])])
        earlier: list[str] = []
        for name, target in (names or [])[:index]:
            earlier += conditions.output_paths(name.strip(), (outputs or {}).get(target))
        self.available = [*(base_paths or []), *earlier]
        self.datalist = f"paths-{self.prefix}"
        step = (steps or [])[index] if not self.is_bound and index < len(steps or []) else {}
        chosen = (
            self.data.get(self.add_prefix("target"), "")
            if self.is_bound
            else self.initial.get("target", "")
        )
        self.mapping = MappingFields(
            self,
            target_fields=(target_fields or {}).get(chosen or "", []),
            mapping=step.get("input_mapping") if step else {},
            paths=self.available,
            datalist=self.datalist,
        )
        exits = [e for e in (step.get("exit_conditions") or []) if isinstance(e, dict)]
        if self.is_bound:
            count = 0
            while count < MOST_EXITS and self.add_prefix(f"exit_{count}_next") in self.data:
                count += 1
        else:
            count = len(exits)
        self.exits: list[ConditionFields] = []
        for number in range(min(count + 1, MOST_EXITS)):
            shown = exits[number] if number < len(exits) else {}
            self.exits.append(
                ConditionFields(
                    self,
                    f"exit_{number}",
                    label="When",
                    expression=shown.get("condition"),
                    datalist=self.datalist,
                )
            )
            self.fields[f"exit_{number}_next"] = forms.CharField(
                required=False,
                label="Go to",
                initial=str(shown.get("next_step", "")),
                widget=SelectOrKeep(choices=[("", "—"), *(next_choices or [])]),
            )
        self.written_exits: list[int] = []

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind, target = data.get("type"), (data.get("target") or "").strip()
        if kind == CHILD and not target.startswith("entity:"):
            self.add_error("target", "Pick the child this step calls.")
        if kind == TOOL and not target.startswith("tool:"):
            self.add_error("target", "Pick the tool this step calls.")
        data["input_mapping"] = self.mapping.clean(self)
        data["exit_conditions"] = []
        for number, builder in enumerate(self.exits):
            expression = builder.clean(self)
            goes = (data.get(f"exit_{number}_next") or "").strip()
            if expression is None and not goes:
                continue
            if not goes:
                self.add_error(f"exit_{number}_next", "Say where the run goes when this holds.")
                continue
            if expression is None:
                if not self.has_error(f"exit_{number}_raw"):
                    self.add_error(f"exit_{number}_0_field", "Build the condition for this exit.")
                continue
            if goes in ("END", "ESCALATE"):
                next_step: int | str = goes
            elif goes.isdecimal() and len(goes) <= 6:
                next_step = int(goes)
            else:
                self.add_error(f"exit_{number}_next", "Pick a step, End or Escalate.")
                continue
            data["exit_conditions"].append({"condition": expression, "next_step": next_step})
            self.written_exits.append(number)
        return data

    def place(self, rest: str, message: str) -> None:
        found = _EXIT.match(rest)
        if found:
            number = int(found.group(1))
            field = self.written_exits[number] if number < len(self.written_exits) else None
            if field is not None:
                part = "next" if found.group(2) == "next_step" else "raw"
                self.add_error(f"exit_{field}_{part}", message)
                return
        if rest.startswith(".input_mapping"):
            self.add_error(None, f"What it is given: {message}")
            return
        super().place(rest, message)

    @property
    def layout(self) -> dict[str, Any]:
        return {
            "fields": [
                self[n]
                for n in ("name", "type", "target", "required", "description", "prompt_template")
            ],
            "conditions": [
                builder.view(self, extra=self[f"exit_{n}_next"])
                for n, builder in enumerate(self.exits)
            ],
            "conditions_title": "Exit conditions: after this step, when …, go to …",
            "mapping": self.mapping.boxes(self),
            "mapping_hidden": self.mapping.hidden(self),
            "mapping_title": "What it is given",
            "mapping_help": "Each input of the child or tool called, from a field available at "
            "this step (pick one) or a value you type. Leave them all empty to pass the run's "
            "fields of the same names.",
            "hidden": [self["step_id"], self["order"]],
            "datalist": self.datalist,
            "paths": self.available,
        }


class PlanSection(Section):
    key = "plan"
    title = "Plan"
    intro = (
        "Fixed steps the entity takes in order. While the plan is on, a child added above "
        "gets a step that calls it when you save, and a removed child's steps go with it."
    )
    template = "designer/editor/_section_rows.html"
    form_class = PlanForm
    rows: ClassVar[dict[str, Rows]] = {
        "steps": Rows(StepForm, "planning.static_plan.steps", "Steps", MOST_STEPS, "Add a step")
    }
    paths: ClassVar[dict[str, str]] = {
        "planning.static_plan.enabled": "enabled",
        "planning.static_plan.fallback_behavior": "fallback_behavior",
        "planning.loop_control.max_iterations": "max_iterations",
        "planning.loop_control.on_exhausted": "on_exhausted",
        "planning.static_plan": "",
        "planning": "",
    }

    def __init__(
        self,
        definition: dict,
        data: QueryDict | None,
        context: EditorContext,
        *,
        add_row: str = "",
    ) -> None:
        steps = read(definition, "planning", "static_plan", "steps") or []
        self.steps = [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []
        links = read(definition, "hierarchy", "children") or []
        self.child_refs = [
            str(link.get("child_id") or "") for link in links if isinstance(link, dict)
        ]
        self.known = known_entities(context.workspace, self.child_refs)
        tools = read(definition, "capabilities", "tools") or []
        self.tools = [t for t in tools if isinstance(t, dict) and t.get("tool_id")]
        self.base_paths = conditions.input_paths(definition)
        if data is not None:
            names = posted_values(data, "plan-steps", "name", MOST_STEPS)
            targets = posted_values(data, "plan-steps", "target", MOST_STEPS)
            self.names = list(zip(names, targets, strict=True))
        else:
            self.names = [(s.get("name") or "", _target_value(s)) for s in self.steps]
        super().__init__(definition, data, context, add_row=add_row)

    def _label(self, ref: str) -> str:
        item = self.known.get(ref)
        return item.name if item else ref

    def row_kwargs(self, name: str) -> dict[str, Any]:
        children = [(f"entity:{ref}", self._label(ref)) for ref in dict.fromkeys(self.child_refs)]
        tools = [(f"tool:{t['tool_id']}", str(t.get("name") or t["tool_id"])) for t in self.tools]
        targets = [g for g in (("Children", children), ("Tools", tools)) if g[1]]
        target_fields: dict[str, list[str]] = {}
        outputs: dict[str, Any] = {}
        for ref in self.child_refs:
            item: Known | None = self.known.get(ref)
            if item is not None:
                target_fields[f"entity:{ref}"] = item.input_fields
                outputs[f"entity:{ref}"] = item.output_schema
        for tool in self.tools:
            function = tool.get("function_schema") or {}
            target_fields[f"tool:{tool['tool_id']}"] = conditions.schema_fields(
                function.get("parameters") if isinstance(function, dict) else None
            )
            outputs[f"tool:{tool['tool_id']}"] = tool.get("output_schema")
        next_choices = [
            *ENDINGS,
            *(
                (str(s["order"]), f"Step {s['order']}: {s.get('name') or ''}")
                for s in self.steps
                if isinstance(s.get("order"), int)
            ),
        ]
        return {
            "targets": targets,
            "target_fields": target_fields,
            "outputs": outputs,
            "names": self.names,
            "base_paths": self.base_paths,
            "next_choices": next_choices,
            "steps": self.steps,
        }

    def initial(self, definition: dict) -> dict[str, Any]:
        plan = read(definition, "planning", "static_plan") or {}
        loop_control = read(definition, "planning", "loop_control") or {}
        return {
            "enabled": bool(plan.get("enabled")),
            "fallback_behavior": plan.get("fallback_behavior") or "STRICT",
            "max_iterations": loop_control.get("max_iterations", 1),
            "on_exhausted": loop_control.get("on_exhausted") or "BLOCK",
        }

    def row_initial(self, name: str, definition: dict) -> list[dict[str, Any]]:
        return [
            {
                "name": step.get("name") or "",
                "description": step.get("description") or "",
                "type": step.get("type") or "THOUGHT",
                "target": _target_value(step),
                "prompt_template": (step.get("target") or {}).get("prompt_template") or "",
                "required": step.get("required", True),
                "step_id": step.get("step_id") or "",
                "order": step.get("order"),
            }
            for step in self.steps
        ]

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        kept = rows["steps"]
        # Orders follow the rows; an exit naming a step by the order it had goes with it.
        renumbered = {row["order"]: n for n, row in enumerate(kept, 1) if row.get("order")}
        taken = {row["step_id"] for row in kept if row.get("step_id")}
        steps = []
        for number, row in enumerate(kept, 1):
            kind, target = row["type"], row["target"].strip()
            step_id = row.get("step_id") or _new_step_id(number, taken)
            steps.append(
                {
                    "step_id": step_id,
                    "order": number,
                    "name": row["name"],
                    "description": row["description"],
                    "type": kind,
                    "target": {
                        "entity_id": target.removeprefix("entity:") if kind == CHILD else None,
                        "tool_id": target.removeprefix("tool:") if kind == TOOL else None,
                        "prompt_template": row["prompt_template"] or None,
                    },
                    "required": row["required"],
                    "input_mapping": row["input_mapping"],
                    "exit_conditions": [
                        {
                            "condition": e["condition"],
                            "next_step": renumbered.get(e["next_step"], e["next_step"])
                            if isinstance(e["next_step"], int)
                            else e["next_step"],
                        }
                        for e in row["exit_conditions"]
                    ],
                }
            )
        plan = deep(definition, "planning", "static_plan")
        plan["enabled"] = data["enabled"]
        plan["fallback_behavior"] = data["fallback_behavior"]
        loop_control = deep(definition, "planning", "loop_control")
        loop_control["max_iterations"] = data["max_iterations"]
        loop_control["on_exhausted"] = data["on_exhausted"]
        before = self.child_refs
        after = [
            str(link.get("child_id") or "")
            for link in read(definition, "hierarchy", "children") or []
            if isinstance(link, dict)
        ]
        unknown = [ref for ref in after if ref not in self.known]
        names = {**self.known, **known_entities(self.context.workspace, unknown)}
        plan["steps"] = keep_in_step(
            steps,
            before=before,
            after=after,
            enabled=data["enabled"],
            labels={ref: item.name for ref, item in names.items()},
        )


def keep_in_step(
    steps: list[dict],
    *,
    before: list[str],
    after: list[str],
    enabled: bool,
    labels: dict[str, str],
) -> list[dict]:
    """The plan's steps after the children went from `before` to `after`: the steps calling
    a removed child go; when the plan is on, a child added (or every child, for a plan on
    with no steps) gets a step calling it at the end, unless a step calls it already."""
    removed = set(before) - set(after)
    steps = [s for s in steps if s["target"].get("entity_id") not in removed or s["type"] != CHILD]
    if not enabled:
        return _renumber(steps)
    adding = list(after) if not steps else [ref for ref in after if ref not in before]
    called = {s["target"].get("entity_id") for s in steps if s["type"] == CHILD}
    taken = {s["step_id"] for s in steps}
    for ref in dict.fromkeys(adding):
        if not ref or ref in called:
            continue
        order = len(steps) + 1
        steps.append(
            {
                "step_id": _new_step_id(order, taken),
                "order": order,
                "name": f"Invoke {labels.get(ref, ref)}",
                "description": "",
                "type": CHILD,
                "target": {"entity_id": ref, "tool_id": None, "prompt_template": None},
                "required": True,
                "input_mapping": {},
                "exit_conditions": [],
            }
        )
        called.add(ref)
    return _renumber(steps)


def _renumber(steps: list[dict]) -> list[dict]:
    """Orders 1, 2, … by position; exits naming a step by its old order follow it."""
    moved = {s["order"]: n for n, s in enumerate(steps, 1)}
    for number, step in enumerate(steps, 1):
        step["order"] = number
        for exit_condition in step["exit_conditions"]:
            target = exit_condition["next_step"]
            if isinstance(target, int) and not isinstance(target, bool):
                exit_condition["next_step"] = moved.get(target, target)
    return steps


def _new_step_id(number: int, taken: set[str]) -> str:
    """`step-001`, … : the first free one from the step's position."""
    while f"step-{number:03d}" in taken:
        number += 1
    step_id = f"step-{number:03d}"
    taken.add(step_id)
    return step_id


def _target_value(step: dict) -> str:
    target = step.get("target") or {}
    if target.get("entity_id"):
        return f"entity:{target['entity_id']}"
    if target.get("tool_id"):
        return f"tool:{target['tool_id']}"
    return ""
