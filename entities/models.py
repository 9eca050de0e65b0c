"""Workspaces, the unified Entity, its child links, plan steps, versions and status audit.

Every write goes through `entities/services.py`, which validates the whole definition first;
the models hold data and the few invariants the database itself can enforce.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Workspace(models.Model):
    """A tenant: every entity, tool, run and approval belongs to exactly one."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Quotas (seed 000 §8.3): a run that would pass one is refused before it starts; 90 % of
    # one raises an alert. Empty: no quota.
    monthly_cost_quota_usd = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="What the workspace's runs may cost in a calendar month (UTC), in USD.",
    )
    user_monthly_run_quota = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How many runs each person may start in a calendar month (UTC).",
    )
    # What subordinates hired with budgets of their own hold of the monthly cost quota while
    # they run (runs/engine/limits.py `quota_hold`): set aside at each hire in one conditional
    # UPDATE of this row, so two hires at once never both take the last of the quota.
    quota_held_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    slack_webhook_secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="The name of a vault secret (kind Webhook URL) holding a Slack incoming "
        "webhook: alerts are posted there as well as mailed to the workspace's admins.",
    )

    class Meta:
        ordering = ["name"]
        # Role permissions, granted per workspace as guardian object permissions. The
        # viewer role is Django's default `view_workspace`.
        permissions = [
            ("design_workspace", "Design entities and tools in the workspace"),
            ("operate_workspace", "Start and cancel runs in the workspace"),
            ("approve_workspace", "Decide human-in-the-loop requests in the workspace"),
            ("administer_workspace", "Manage the workspace and its members"),
        ]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    DESIGNER = "designer", "Designer"
    OPERATOR = "operator", "Operator"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"


class Membership(models.Model):
    """One role of one user in one workspace. The permissions it grants live in guardian."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workspace", "user", "role"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "user", "role"], name="membership_unique_role"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.workspace}"


class EntityType(models.TextChoices):
    ACTION = "ACTION"
    SKILL = "SKILL"
    AGENT = "AGENT"
    PROCESS = "PROCESS"


class EntityStatus(models.TextChoices):
    DRAFT = "DRAFT"
    ACTIVE = "ACTIVE"
    DEPRECATED = "DEPRECATED"
    ARCHIVED = "ARCHIVED"


class Relationship(models.TextChoices):
    SEQUENTIAL = "SEQUENTIAL"
    PARALLEL = "PARALLEL"
    CONDITIONAL = "CONDITIONAL"


class StepType(models.TextChoices):
    THOUGHT = "THOUGHT"
    ACTION = "ACTION"
    TOOL_CALL = "TOOL_CALL"
    CHILD_ENTITY_INVOCATION = "CHILD_ENTITY_INVOCATION"
    DELEGATE = "DELEGATE"  # hires a subordinate at run time (runs/engine/hiring.py)


# The JSON sections of seed 000's `hierarchical_entities` table, in the seed's order. Each is
# validated by `entities/schemas/<section>.json` and filled with its defaults on save.
JSON_SECTIONS = (
    "persona",
    "logic_gate",
    "planning",
    "capabilities",
    "governance",
    "io_contract",
    "observability",
    "metadata_extensions",
)


class Entity(models.Model):
    """An Action, Skill, Agent or Process: one recursive entity (seed 000 §2)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="entities")
    external_id = models.CharField(
        max_length=100,
        null=True,
        blank=True,
        help_text="The definition's own id, such as 'proc-001'; references resolve by it.",
    )

    # metadata
    version = models.CharField(max_length=20, default="1.0.0")
    type = models.CharField(max_length=20, choices=EntityType.choices)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    tags = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=20, choices=EntityStatus.choices, default=EntityStatus.DRAFT
    )

    # identity
    name = models.CharField(max_length=100)
    display_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(max_length=1000, blank=True)
    icon = models.CharField(max_length=50, blank=True)
    color = models.CharField(max_length=7, blank=True)

    # hierarchy: links are ChildLink rows; `parent` is only the designer's home parent.
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="homed_children"
    )
    is_atomic = models.BooleanField(default=True, editable=False)
    composition_depth = models.PositiveIntegerField(default=0, editable=False)

    persona = models.JSONField(default=dict, blank=True)
    logic_gate = models.JSONField(default=dict, blank=True)
    planning = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    governance = models.JSONField(default=dict, blank=True)
    io_contract = models.JSONField(default=dict, blank=True)
    observability = models.JSONField(default=dict, blank=True)
    metadata_extensions = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "entities"
        ordering = ["composition_depth", "name"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="entity_unique_name"),
            models.UniqueConstraint(
                fields=["workspace", "external_id"],
                condition=models.Q(external_id__isnull=False),
                name="entity_unique_external_id",
            ),
            models.CheckConstraint(
                condition=models.Q(type__in=EntityType.values), name="entity_type_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=EntityStatus.values), name="entity_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["type"], name="entity_type_idx"),
            models.Index(fields=["status"], name="entity_status_idx"),
            models.Index(fields=["parent"], name="entity_parent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type.lower()})"

    @property
    def ref(self) -> str:
        """The id other definitions use for this entity in the exchange format."""
        return self.external_id or str(self.id)

    @property
    def is_active(self) -> bool:
        """Only active entities run."""
        return self.status == EntityStatus.ACTIVE


class ChildLink(models.Model):
    """A parent → child edge of the hierarchy; an entity may be a child of several parents."""

    parent = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="child_links")
    child = models.ForeignKey(Entity, on_delete=models.PROTECT, related_name="parent_links")
    relationship = models.CharField(
        max_length=20, choices=Relationship.choices, default=Relationship.SEQUENTIAL
    )
    condition = models.JSONField(default=dict, blank=True)
    order = models.PositiveIntegerField(default=1)
    input_mapping = models.JSONField(default=dict, blank=True)
    # The child's version the link runs: "" for its newest at the run's start, else an exact
    # version or an npm-style range (runs/engine/versions.py); `version` in the definition.
    version = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["order", "id"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(parent=models.F("child")), name="childlink_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.parent.name} → {self.child.name}"


class PlanStep(models.Model):
    """One step of an entity's static plan (seed 000 §3.5.1)."""

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="plan_steps")
    step_id = models.CharField(max_length=100)
    order = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    type = models.CharField(max_length=30, choices=StepType.choices)
    target_entity = models.ForeignKey(
        Entity, on_delete=models.PROTECT, null=True, blank=True, related_name="targeted_by_steps"
    )
    target_tool_id = models.CharField(max_length=100, blank=True)
    prompt_template = models.TextField(blank=True)
    required = models.BooleanField(default=True)
    exit_conditions = models.JSONField(default=list, blank=True)
    input_mapping = models.JSONField(default=dict, blank=True)
    # A DELEGATE step's hire: role, task, budget_usd, reason (runs/engine/hiring.py).
    hire = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["order", "id"]

    def __str__(self) -> str:
        return f"{self.order}. {self.name}"


class EntityVersion(models.Model):
    """An immutable snapshot of a whole definition, in the exchange format."""

    class Change(models.TextChoices):
        INITIAL = "INITIAL"
        MAJOR = "MAJOR"
        MINOR = "MINOR"
        PATCH = "PATCH"

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=20)
    change = models.CharField(max_length=10, choices=Change.choices)
    summary = models.TextField(blank=True)
    definition = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["entity", "version"], name="entityversion_unique")
        ]

    def __str__(self) -> str:
        return f"{self.entity.name} {self.version}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValueError("An entity version is immutable once written.")
        super().save(*args, **kwargs)


class EntityStatusChange(models.Model):
    """The audit trail of status transitions (seed 000 §3.1: logged for compliance)."""

    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="status_changes")
    from_status = models.CharField(max_length=20, choices=EntityStatus.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=EntityStatus.choices)
    changed_at = models.DateTimeField(auto_now_add=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.entity.name}: {self.from_status or '∅'} → {self.to_status}"
