"""The model and how the entity reasons and recovers: provider, model, sampling, retries and
self-review."""

from __future__ import annotations

from typing import Any

from django import forms

from designer.editor.base import Section, deep, read

REASONING_MODES = [
    ("CHAIN_OF_THOUGHT", "Chain of thought"),
    ("REACT", "ReAct (reason, act with tools, observe)"),
    ("REFLECTION", "Reflection"),
    ("TREE_OF_THOUGHTS", "Tree of thoughts"),
]
BACKOFF = [("EXPONENTIAL", "Exponential"), ("LINEAR", "Linear"), ("NONE", "None")]
RETRY_ON = [
    ("TOOL_FAILURE", "A tool failed"),
    ("LLM_ERROR", "The model failed"),
    ("VALIDATION_ERROR", "The output did not match its contract"),
    ("TIMEOUT", "A timeout"),
]
ON_REVIEW_FAILURE = [
    ("RETRY", "Retry"),
    ("ESCALATE", "Escalate to a person"),
    ("ALTERNATIVE_PATH", "Take the alternative path"),
    ("ABORT", "Abort"),
]
REVIEW_SCOPES = [
    ("OUTPUT", "The output, at the end of each pass"),
    ("EACH_STEP", "Each step's result, as it finishes"),
]


class ModelForm(forms.Form):
    model_provider = forms.CharField(
        max_length=100,
        label="Provider",
        initial="local",
        help_text="A litellm provider; “local” is the built-in offline model, which needs no "
        "key and no network.",
        widget=forms.TextInput(attrs={"list": "model-providers", "autocomplete": "off"}),
    )
    model_name = forms.CharField(
        max_length=200,
        label="Model",
        initial="offline",
        widget=forms.TextInput(attrs={"list": "model-names", "autocomplete": "off"}),
    )
    temperature = forms.FloatField(min_value=0, max_value=2, initial=0.7)
    top_p = forms.FloatField(min_value=0, max_value=1, initial=1.0, label="Top p")
    max_tokens = forms.IntegerField(
        min_value=1,
        max_value=10_000_000,
        required=False,
        label="Most tokens per answer",
        help_text="Empty: the model's own limit.",
    )
    reasoning_mode = forms.ChoiceField(choices=REASONING_MODES, label="Reasoning mode")
    max_retries = forms.IntegerField(min_value=0, max_value=20, initial=3, label="Retries")
    backoff_strategy = forms.ChoiceField(choices=BACKOFF, label="Wait between retries")
    retry_on = forms.MultipleChoiceField(
        choices=RETRY_ON,
        required=False,
        label="Retry when",
        widget=forms.CheckboxSelectMultiple,
    )
    review_enabled = forms.BooleanField(
        required=False, label="Review its own output before handing it on"
    )
    review_prompt = forms.CharField(
        required=False,
        label="Review prompt",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the reviewing model is asked; {output} is replaced by the output.",
    )
    review_on_failure = forms.ChoiceField(choices=ON_REVIEW_FAILURE, label="When the review fails")
    review_scope = forms.ChoiceField(
        choices=REVIEW_SCOPES,
        label="What is reviewed",
        help_text="Each step's result is checked as it finishes, before the plan goes on; "
        "the output, once at the end of each pass.",
    )


class ModelSection(Section):
    key = "model"
    title = "Model and reasoning"
    intro = "Which model the entity calls, how, and what it does when something fails."
    extra_template = "designer/editor/_model_lists.html"
    groups = (
        ("", ("model_provider", "model_name")),
        ("", ("temperature", "top_p", "max_tokens", "reasoning_mode")),
        ("When something fails", ("max_retries", "backoff_strategy", "retry_on")),
        ("Self-review", ("review_enabled", "review_scope", "review_prompt", "review_on_failure")),
    )
    form_class = ModelForm
    paths = {
        "logic_gate.reasoning_config.model_provider": "model_provider",
        "logic_gate.reasoning_config.model_name": "model_name",
        "logic_gate.reasoning_config.temperature": "temperature",
        "logic_gate.reasoning_config.top_p": "top_p",
        "logic_gate.reasoning_config.max_tokens": "max_tokens",
        "logic_gate.reasoning_config.reasoning_mode": "reasoning_mode",
        "logic_gate.retry_policy.max_retries": "max_retries",
        "logic_gate.retry_policy.backoff_strategy": "backoff_strategy",
        "logic_gate.retry_policy.retry_on": "retry_on",
        "logic_gate.review_mechanism.enabled": "review_enabled",
        "logic_gate.review_mechanism.review_prompt": "review_prompt",
        "logic_gate.review_mechanism.on_failure": "review_on_failure",
        "logic_gate.review_mechanism.scope": "review_scope",
        "logic_gate": "",
    }

    def initial(self, definition: dict) -> dict[str, Any]:
        config = read(definition, "logic_gate", "reasoning_config") or {}
        retry = read(definition, "logic_gate", "retry_policy") or {}
        review = read(definition, "logic_gate", "review_mechanism") or {}
        return {
            "model_provider": config.get("model_provider") or "local",
            "model_name": config.get("model_name") or "offline",
            "temperature": config.get("temperature", 0.7),
            "top_p": config.get("top_p", 1.0),
            "max_tokens": config.get("max_tokens"),
            "reasoning_mode": config.get("reasoning_mode") or "CHAIN_OF_THOUGHT",
            "max_retries": retry.get("max_retries", 3),
            "backoff_strategy": retry.get("backoff_strategy") or "EXPONENTIAL",
            "retry_on": retry.get("retry_on", ["TOOL_FAILURE", "LLM_ERROR", "TIMEOUT"]),
            "review_enabled": bool(review.get("enabled")),
            "review_prompt": review.get("review_prompt") or "",
            "review_on_failure": review.get("on_failure") or "RETRY",
            "review_scope": review.get("scope") or "OUTPUT",
        }

    def write(self, definition: dict, data: dict[str, Any], rows: dict[str, list[dict]]) -> None:
        config = deep(definition, "logic_gate", "reasoning_config")
        for name in (
            "model_provider",
            "model_name",
            "temperature",
            "top_p",
            "max_tokens",
            "reasoning_mode",
        ):
            config[name] = data[name]
        retry = deep(definition, "logic_gate", "retry_policy")
        retry["max_retries"] = data["max_retries"]
        retry["backoff_strategy"] = data["backoff_strategy"]
        retry["retry_on"] = list(data["retry_on"])
        review = deep(definition, "logic_gate", "review_mechanism")
        review["enabled"] = data["review_enabled"]
        review["review_prompt"] = data["review_prompt"]
        review["on_failure"] = data["review_on_failure"]
        review["scope"] = data["review_scope"]
