"""The types of an entity's definition as the engine reads it (seed 000 §3; the JSON Schemas in
`entities/schemas/`): what `entities.definition.normalize` produces and a version pins.

A definition is JSON: these TypedDicts name its sections and the fields the engine reads.
Every key is optional to the type checker (normalize fills the defaults, but the engine also
reads partial definitions it builds itself, and reads optional fields with `.get`); lists of
objects the engine passes on whole (steps, links, tools, checkpoints, criteria) are JSON
objects. `JSON` marks the values that are any JSON at all.
"""

from __future__ import annotations

from typing import Any, TypedDict

JSON = Any  # a JSON value: None, bool, int, float, str, list of JSON, dict of str to JSON
JSONObject = dict[str, Any]


class Persona(TypedDict, total=False):
    system_prompt: str
    examples: list[JSONObject]
    behavioral_constraints: list[JSON]  # text, or {"constraint", "rule"} objects


class Identity(TypedDict, total=False):
    name: str
    display_name: str
    description: str
    persona: Persona


class Metadata(TypedDict, total=False):
    id: str | None
    version: str | None
    type: str  # ACTION, SKILL, AGENT, PROCESS
    status: str
    tags: list[str]


class Input(TypedDict, total=False):
    schema: JSONObject
    validation_rules: list[JSONObject]


class Output(TypedDict, total=False):
    schema: JSONObject
    transformations: list[JSONObject]


class IoContract(TypedDict, total=False):
    input: Input
    output: Output
    state_contract: JSONObject


class ReasoningConfig(TypedDict, total=False):
    model_provider: str
    model_name: str
    model_version: str | None
    temperature: float
    top_p: float
    max_tokens: int | None
    reasoning_mode: str


class RetryPolicy(TypedDict, total=False):
    max_retries: int
    backoff_strategy: str
    backoff_multiplier: float
    retry_on: list[str]


class ReviewMechanism(TypedDict, total=False):
    enabled: bool
    review_prompt: str | None
    success_criteria: list[JSONObject]
    on_failure: str
    scope: str
    judge_confidence_threshold: float | None


class LogicGate(TypedDict, total=False):
    reasoning_config: ReasoningConfig
    retry_policy: RetryPolicy
    review_mechanism: ReviewMechanism


class StaticPlan(TypedDict, total=False):
    enabled: bool
    steps: list[JSONObject]
    fallback_behavior: str


class DynamicPlanning(TypedDict, total=False):
    enabled: bool
    planning_prompt: str | None
    constraints: list[JSON]
    reconciliation_strategy: str
    allowed_deviations: dict[str, bool]


class LoopControl(TypedDict, total=False):
    max_iterations: int | None
    convergence_criteria: list[JSONObject]
    iteration_context_mode: str
    summary_every_n_iterations: int | None


class Planning(TypedDict, total=False):
    static_plan: StaticPlan
    dynamic_planning: DynamicPlanning
    loop_control: LoopControl


class RetentionPolicy(TypedDict, total=False):
    max_items: int | None
    ttl_seconds: int | None
    summarization_threshold: int | None


class Memory(TypedDict, total=False):
    enabled: bool
    scope: str
    storage_backend: str
    retention_policy: RetentionPolicy
    access_pattern: str


class ContextEngineering(TypedDict, total=False):
    max_context_tokens: int
    context_priority: list[str]
    artifact_handling: JSONObject


class Capabilities(TypedDict, total=False):
    tools: list[JSONObject]  # tool definitions (entities/schemas/tool.json)
    memory: Memory
    context_engineering: ContextEngineering


class Hierarchy(TypedDict, total=False):
    parent_id: str | None
    children: list[JSONObject]  # links: child_id, relationship, condition, input_mapping…
    is_atomic: bool
    composition_depth: int


class CostControls(TypedDict, total=False):
    max_cost_usd: float | None
    cumulative_cost_usd: float | None
    alert_threshold_usd: float | None
    on_budget_exhausted: str


class ExecutionLimits(TypedDict, total=False):
    timeout_ms: int
    max_recursion_depth: int
    max_tool_calls: int | None
    max_llm_calls: int | None


class HumanOversight(TypedDict, total=False):
    hitl_checkpoints: list[JSONObject]
    audit_level: str
    pii_handling: str


class OutputValidation(TypedDict, total=False):
    enabled: bool
    schema: JSONObject | None


class SafetyRails(TypedDict, total=False):
    content_filters: list[str]
    action_restrictions: list[JSONObject]
    output_validation: OutputValidation
    on_flagged_output: str


class Governance(TypedDict, total=False):
    cost_controls: CostControls
    execution_limits: ExecutionLimits
    human_oversight: HumanOversight
    safety_rails: SafetyRails


class Logging(TypedDict, total=False):
    log_level: str
    log_thoughts: bool
    log_tool_calls: bool
    log_state_changes: bool


class Tracing(TypedDict, total=False):
    trace_id_propagation: bool
    span_annotations: list[str]


class Observability(TypedDict, total=False):
    logging: Logging
    metrics: JSONObject
    tracing: Tracing


class Definition(TypedDict, total=False):
    """An entity's definition, normalized (entities/definition.py)."""

    metadata: Metadata
    identity: Identity
    io_contract: IoContract
    logic_gate: LogicGate
    planning: Planning
    capabilities: Capabilities
    hierarchy: Hierarchy
    governance: Governance
    observability: Observability
