"""The entities API (issue 6): entities of your workspaces, their versions, import and export,
and new entities from templates (`clone`).

Reads go through `entities.selectors` (an entity of another workspace is a 404). Every write
goes through the same services as the admin (`entity_save`, `entity_set_status`,
`entity_rollback`, `entities_import`), so a definition is validated and versioned exactly as
a designer's save is. A definition the services refuse answers 400 VALIDATION_ERROR with every
problem in `details`, keyed by where it is in the request body (`definition.identity.name`,
`entities[2].hierarchy.children[0]`); a user without the designer role in the entity's
workspace gets 403 PERMISSION_DENIED naming the role.

A definition travels in the exchange format of seed 000 (`entities/exchange.py`), the same
JSON the admin exports and imports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.urls import path, re_path, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import exceptions, generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_contract import Conflict, ErrorSerializer, StrictSerializer, error_responses
from config.api_lists import ChoicesFilter, FilteredListAPIView, ListFilters, workspace_among_yours
from entities.definition import SECTIONS, DefinitionInvalid, Problem
from entities.exchange import (
    ImportFileError,
    definition_of,
    definitions_from_document,
    export_workspace,
)
from entities.models import (
    Entity,
    EntityStatus,
    EntityType,
    EntityVersion,
    Membership,
    Role,
    Workspace,
)
from entities.selectors import (
    LinkUpgrade,
    entity_find,
    entity_get,
    entity_list,
    entity_upgrades,
    entity_version_get,
    entity_version_list,
    workspace_find,
)
from entities.serializers import WorkspaceRefSerializer
from entities.services import (
    CLONE_CHILDREN,
    CLONE_LINK,
    SaveResult,
    entities_import,
    entity_clone,
    entity_rollback,
    entity_save,
    entity_set_status,
    is_template,
)
from governance.permissions import (
    ADMINISTER,
    APPROVE,
    DESIGN,
    OPERATE,
    VIEW,
    allowed_workspace_ids,
    has_perm,
    workspaces_for,
)

# -- refusals -----------------------------------------------------------------------------------


TOO_LARGE = {
    413: OpenApiResponse(
        ErrorSerializer,
        description="PAYLOAD_TOO_LARGE: the body is over HIERARCH_IMPORT_MAX_BYTES "
        "(5 MB by default)",
    )
}


def problem_details(problems: Iterable[Problem], *, prefix: str) -> dict[str, str]:
    """`DefinitionInvalid.problems` as `details`: {where in the request body: what is wrong}.

    A problem of a bundle's definition is labelled `entities[2] (name)` by the services; its
    key is then `entities[2].<path>` and the name leads the message."""
    details: dict[str, str] = {}
    for problem in problems:
        where, message = prefix, problem.message
        label = re.match(r"^(entities\[\d+\])(?: \((.*)\))?$", problem.entity or "")
        if label:
            where = label.group(1)
            if label.group(2):
                message = f"({label.group(2)}) {message}"
        elif problem.entity:
            message = f"{problem.entity}: {message}"
        if problem.path:
            joiner = "" if problem.path.startswith("[") else "."
            where = f"{where}{joiner}{problem.path}" if where else problem.path
        where = where or "definition"
        details[where] = f"{details[where]} {message}" if where in details else message
    return details


def _require_design(user: Any, workspace: Workspace, doing: str) -> None:
    if not has_perm(user, DESIGN, workspace):
        raise exceptions.PermissionDenied(
            f"{user.get_username()} may not {doing} in {workspace.name}; the designer role "
            "(or admin) is needed"
        )


# -- what an answer looks like ------------------------------------------------------------------


def _entity_url(entity: Entity) -> str:
    return reverse("api:entity-detail", args=[entity.pk])


class EntitySummarySerializer(serializers.ModelSerializer):
    """An entity as the list shows it."""

    url = serializers.SerializerMethodField(help_text="This entity in the API.")
    workspace = WorkspaceRefSerializer(read_only=True)
    type = serializers.ChoiceField(choices=EntityType.choices, read_only=True)
    status = serializers.ChoiceField(choices=EntityStatus.choices, read_only=True)
    external_id = serializers.CharField(
        allow_null=True, read_only=True, help_text="The definition's own id, such as proc-001."
    )
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    is_template = serializers.SerializerMethodField(
        help_text="Marked a template (metadata_extensions.ui_hints.is_template): POST a name "
        "to its clone address to start a new entity from a copy of it."
    )

    class Meta:
        model = Entity
        fields = [
            "id",
            "url",
            "workspace",
            "external_id",
            "name",
            "display_name",
            "type",
            "status",
            "version",
            "description",
            "tags",
            "is_atomic",
            "composition_depth",
            "is_template",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_url(self, entity: Entity) -> str:
        return _entity_url(entity)

    def get_is_template(self, entity: Entity) -> bool:
        return is_template(entity)


class UpgradeSerializer(serializers.Serializer):
    """A child link whose `version` (an exact version or a range) misses a newer version of
    its child: an upgrade is available."""

    link = serializers.CharField(
        read_only=True, help_text="Where the link is in the definition: hierarchy.children[N]."
    )
    child_id = serializers.UUIDField(read_only=True, help_text="The child entity's id.")
    child_name = serializers.CharField(read_only=True)
    range = serializers.CharField(
        read_only=True, help_text="The link's `version`: an exact version or an npm-style range."
    )
    resolved_version = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="What a run started now takes: the newest version the range allows "
        "(null when none does).",
    )
    newest_version = serializers.CharField(read_only=True, help_text="The child's newest.")
    bump = serializers.ChoiceField(
        choices=["MAJOR", "MINOR", "PATCH"],
        read_only=True,
        allow_null=True,
        help_text="The part of the version moving to the newest bumps (entities/versioning.py: "
        "MAJOR when the io contract breaks callers, MINOR when capabilities are added, PATCH "
        "otherwise); null when the range allows no saved version.",
    )
    summary = serializers.CharField(read_only=True, help_text="Why that version was bumped.")
    widened_range = serializers.CharField(
        read_only=True,
        help_text="A `version` for the link that takes the newest, written as the range is.",
    )


def _upgrade_data(found: LinkUpgrade) -> dict[str, Any]:
    upgrade = found.upgrade
    return {
        "link": found.path,
        "child_id": found.child.pk,
        "child_name": found.child.name,
        "range": upgrade.range,
        "resolved_version": upgrade.resolved,
        "newest_version": upgrade.newest,
        "bump": upgrade.change or None,
        "summary": upgrade.summary,
        "widened_range": upgrade.widened,
    }


class EntitySerializer(EntitySummarySerializer):
    """One entity: its current definition in the exchange format, and where to go next."""

    definition = serializers.SerializerMethodField(
        help_text="The current definition in the exchange format, tools "
        "written out in full; PUT it back, changed, to save a new version."
    )
    upgrades = serializers.SerializerMethodField(
        help_text="The child links whose `version` misses a newer version of their child; "
        "empty when every link runs its child's newest (a link without a `version` always "
        "does). PUT the definition back with a link's `version` set to `widened_range` to "
        "take it."
    )
    versions_url = serializers.SerializerMethodField(help_text="The version history.")
    execute_url = serializers.SerializerMethodField(help_text="POST here to start a run.")
    export_url = serializers.SerializerMethodField(
        help_text="This entity and everything below it, in the exchange format."
    )

    class Meta(EntitySummarySerializer.Meta):
        fields = [
            *EntitySummarySerializer.Meta.fields,
            "definition",
            "upgrades",
            "versions_url",
            "execute_url",
            "export_url",
        ]
        read_only_fields = fields

    def get_definition(self, entity: Entity) -> dict[str, Any]:
        return definition_of(entity)

    @extend_schema_field(UpgradeSerializer(many=True))
    def get_upgrades(self, entity: Entity) -> list[dict[str, Any]]:
        return [_upgrade_data(found) for found in entity_upgrades(entity=entity)]

    def get_versions_url(self, entity: Entity) -> str:
        return reverse("api:entity-versions", args=[entity.pk])

    def get_execute_url(self, entity: Entity) -> str:
        # The execute endpoint lives in runs/api.py; its address is fixed by seed 000 §7.1.
        return f"{_entity_url(entity)}/execute"

    def get_export_url(self, entity: Entity) -> str:
        url = reverse("api:workspace-export", args=[entity.workspace.slug])
        return f"{url}?root={entity.pk}"


class EntityVersionSummarySerializer(serializers.ModelSerializer):
    """A version in the history."""

    url = serializers.SerializerMethodField(help_text="This version's snapshot.")
    change = serializers.ChoiceField(
        choices=EntityVersion.Change.choices,
        read_only=True,
        help_text="What the version bumped: INITIAL, MAJOR (io_contract broke), MINOR "
        "(capabilities added) or PATCH.",
    )
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, read_only=True, help_text="Who saved it."
    )

    class Meta:
        model = EntityVersion
        fields = ["version", "url", "change", "summary", "created_at", "created_by"]
        read_only_fields = fields

    def get_url(self, version: EntityVersion) -> str:
        return reverse("api:entity-version", args=[version.entity_id, version.version])


class EntityVersionSerializer(EntityVersionSummarySerializer):
    """One version: the immutable snapshot of the whole definition."""

    entity = serializers.UUIDField(source="entity_id", read_only=True)
    definition = serializers.DictField(
        read_only=True, help_text="The definition as saved, in the exchange format."
    )
    rollback_url = serializers.SerializerMethodField(
        help_text="POST here to restore this snapshot as a new version."
    )

    class Meta(EntityVersionSummarySerializer.Meta):
        fields = [
            *EntityVersionSummarySerializer.Meta.fields,
            "entity",
            "definition",
            "rollback_url",
        ]
        read_only_fields = fields

    def get_rollback_url(self, version: EntityVersion) -> str:
        return reverse("api:entity-rollback", args=[version.entity_id, version.version])


class EntitySavedSerializer(EntitySerializer):
    """The entity after a save, with the version the save wrote."""

    saved_version = serializers.SerializerMethodField(
        help_text="The version this save wrote; null when the definition did not change "
        "(the version stays)."
    )

    class Meta(EntitySerializer.Meta):
        fields = [*EntitySerializer.Meta.fields, "saved_version"]
        read_only_fields = fields

    @extend_schema_field(EntityVersionSummarySerializer(allow_null=True))
    def get_saved_version(self, entity: Entity) -> dict[str, Any] | None:
        version = self.context.get("saved_version")
        return None if version is None else EntityVersionSummarySerializer(version).data


PERMISSION_NAMES = (
    ("view", VIEW),
    ("design", DESIGN),
    ("operate", OPERATE),
    ("approve", APPROVE),
    ("administer", ADMINISTER),
)


class WorkspaceSerializer(serializers.ModelSerializer):
    """A workspace of yours, with what you may do in it."""

    roles = serializers.SerializerMethodField(help_text="Your roles in the workspace.")
    can = serializers.SerializerMethodField(
        help_text="What those roles let you do: view, design, operate, approve, administer."
    )
    export_url = serializers.SerializerMethodField(help_text="Its entities as one document.")
    import_url = serializers.SerializerMethodField(help_text="POST definitions here.")

    class Meta:
        model = Workspace
        fields = ["id", "slug", "name", "roles", "can", "export_url", "import_url"]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.ChoiceField(choices=Role.choices)))
    def get_roles(self, workspace: Workspace) -> list[str]:
        return sorted(self.context.get("roles", {}).get(workspace.pk, []))

    @extend_schema_field(
        serializers.ListField(
            child=serializers.ChoiceField(choices=[name for name, _ in PERMISSION_NAMES])
        )
    )
    def get_can(self, workspace: Workspace) -> list[str]:
        user = self.context["request"].user
        return [name for name, perm in PERMISSION_NAMES if has_perm(user, perm, workspace)]

    def get_export_url(self, workspace: Workspace) -> str:
        return reverse("api:workspace-export", args=[workspace.slug])

    def get_import_url(self, workspace: Workspace) -> str:
        return reverse("api:workspace-import", args=[workspace.slug])


class ImportResultSerializer(serializers.Serializer):
    """What an import did, entity by entity."""

    workspace = WorkspaceRefSerializer(read_only=True)
    imported = serializers.IntegerField(help_text="How many definitions the body held.")
    created = serializers.IntegerField(help_text="New entities.")
    updated = serializers.IntegerField(help_text="Entities that got a new version.")
    unchanged = serializers.IntegerField(help_text="Entities whose definition was the same.")
    entities = EntitySummarySerializer(many=True, read_only=True)


class ExportDocumentSerializer(serializers.Serializer):
    """A bundle in the exchange format; import takes it back as it is."""

    entities = serializers.ListField(
        child=serializers.DictField(),
        help_text="Definitions in the exchange format, parents before children.",
    )


# -- what a client sends ------------------------------------------------------------------------


@extend_schema_field(
    {
        "type": "object",
        # The sections are a fixed set (anything else is refused, naming the closest one);
        # what each holds is checked by the services against the section's JSON Schema
        # (entities/schemas/) and the rest of the workspace, which no OpenAPI schema can say.
        "properties": {
            # null, like a section left out, takes the defaults
            section: {"type": "object", "additionalProperties": {}, "nullable": True}
            for section in SECTIONS
        },
        "additionalProperties": False,
    }
)
class DefinitionField(serializers.JSONField):
    """A whole definition in the exchange format; the services validate it."""


class EntityCreateSerializer(StrictSerializer):
    """A new entity: the workspace (id or slug) and its definition in the exchange format.
    `metadata.id` may carry a string id such as `proc-001`, kept as `external_id`."""

    workspace = serializers.CharField(
        max_length=50, help_text="A workspace's id or slug, one where you design."
    )
    definition = DefinitionField(
        help_text="The definition in the exchange format; sections left out take their defaults."
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        # Once the body is well formed: the workspace, or 404 whether it exists or not, as
        # for a workspace in a path or a filter.
        data["workspace"] = workspace_among_yours(self.context["request"].user, data["workspace"])
        return data


class EntityUpdateSerializer(StrictSerializer):
    """The entity's whole new definition; what it leaves out takes the defaults, as in an
    import. Its `metadata.id`, when given, must be this entity's."""

    definition = DefinitionField(
        help_text="The whole definition in the exchange format (the detail's `definition`, "
        "changed)."
    )


class UpperChoiceField(serializers.ChoiceField):
    """A choice of UPPER_CASE values that takes them in any case."""

    def to_internal_value(self, data: Any) -> Any:
        return super().to_internal_value(data.upper() if isinstance(data, str) else data)


class EntityCloneSerializer(StrictSerializer):
    """A new entity from a template: its name, and what becomes of the template's children."""

    name = serializers.RegexField(
        regex=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=100,
        help_text="The new entity's name, unique in the workspace.",
        error_messages={
            "invalid": "may contain only letters, digits, '_', '-' and '.', and must start with "
            "a letter or digit"
        },
    )
    children = UpperChoiceField(
        choices=list(CLONE_CHILDREN.items()),
        default=CLONE_LINK,
        help_text="LINK (the default): the copy has the template's children, shared; COPY: "
        "each direct child is copied too, as a draft named <name>.<child's name>.",
        error_messages={
            "invalid_choice": '"{input}" is not a choice; use ' + " or ".join(CLONE_CHILDREN)
        },
    )


class EntityStatusSerializer(StrictSerializer):
    """A move to another status: DRAFT → ACTIVE/ARCHIVED, ACTIVE → DRAFT/DEPRECATED/ARCHIVED,
    DEPRECATED → ACTIVE/ARCHIVED, ARCHIVED → DRAFT. Only ACTIVE entities run."""

    status = UpperChoiceField(
        choices=EntityStatus.choices,
        error_messages={
            "invalid_choice": '"{input}" is not a status; use one of '
            + ", ".join(EntityStatus.values)
        },
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=200, help_text="Why, for the audit log."
    )


class EntityFilters(ListFilters):
    """The list's query string."""

    workspace = serializers.CharField(required=False, help_text="A workspace's id or slug.")
    type = ChoicesFilter(
        choices=EntityType.values,
        noun="type",
        help_text="One or more types, repeated or comma-separated, in any case.",
    )
    status = ChoicesFilter(
        choices=EntityStatus.values,
        noun="status",
        help_text="One or more statuses, repeated or comma-separated, in any case.",
    )
    name = serializers.CharField(required=False, help_text="Exactly this name.")
    q = serializers.CharField(
        required=False,
        max_length=200,
        help_text="Words in the name, display name or description (any case).",
    )
    tag = serializers.CharField(required=False, max_length=100, help_text="Carries this tag.")
    template = serializers.BooleanField(
        required=False,
        help_text="true: the templates only (what `clone` takes); false: the other entities.",
    )

    def narrow(self, entities: QuerySet[Entity]) -> QuerySet[Entity]:
        filters = self.validated_data
        if "template" in filters:
            templates = Q(metadata_extensions__ui_hints__is_template=True)
            entities = entities.filter(templates if filters["template"] else ~templates)
        if "workspace" in filters:
            entities = entities.filter(workspace=filters["workspace"])
        if "type" in filters:
            entities = entities.filter(type__in=filters["type"])
        if "status" in filters:
            entities = entities.filter(status__in=filters["status"])
        if "name" in filters:
            entities = entities.filter(name=filters["name"])
        for word in filters.get("q", "").split():
            entities = entities.filter(
                Q(name__icontains=word)
                | Q(display_name__icontains=word)
                | Q(description__icontains=word)
            )
        if "tag" in filters:
            entities = _with_tag(entities, filters["tag"])
        return entities


def _with_tag(entities: QuerySet[Entity], tag: str) -> QuerySet[Entity]:
    if connection.features.supports_json_field_contains:
        return entities.filter(tags__contains=[tag])
    # SQLite (the embedded default) cannot look inside a JSON list; the tags are few.
    tagged = [pk for pk, tags in entities.values_list("pk", "tags") if tag in (tags or [])]
    return entities.filter(pk__in=tagged)


class ExportFilters(StrictSerializer):
    root = serializers.CharField(
        required=False,
        max_length=100,
        help_text="Export only this entity (its id, string id or name) and everything below it.",
    )


# -- the endpoints ------------------------------------------------------------------------------

# A small definition for the documentation's examples: sections left out take their defaults.
EXAMPLE_DEFINITION = {
    "metadata": {"type": "ACTION", "status": "ACTIVE", "tags": ["nlp"]},
    "identity": {
        "name": "summarize_text",
        "description": "Summarizes a text in three sentences",
        "persona": {"system_prompt": "You summarize texts faithfully."},
    },
    "io_contract": {
        "input": {
            "schema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            }
        },
        "output": {
            "schema": {
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "required": ["summary"],
            }
        },
    },
}

VERSION_PARAMETER = OpenApiParameter(
    "version",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$",
    description="A version of the entity, such as 1.2.0.",
)


def _saved(request: Request, result: SaveResult, *, status_code: int = 200) -> Response:
    entity = entity_get(user=request.user, pk=result.entity.pk)
    body = EntitySavedSerializer(
        entity, context={"request": request, "saved_version": result.version}
    ).data
    response = Response(body, status=status_code)
    if status_code == status.HTTP_201_CREATED:
        response["Location"] = _entity_url(entity)
    return response


class EntityList(FilteredListAPIView):
    serializer_class = EntitySummarySerializer
    filters_class = EntityFilters

    def get_queryset(self) -> QuerySet[Entity]:
        # A total order, so an entity never shows on two pages or none.
        return entity_list(user=self.request.user).order_by("name", "workspace__slug", "pk")

    @extend_schema(
        tags=["entities"],
        summary="Entities of your workspaces",
        description="In name order; filters narrow it.",
        parameters=[EntityFilters],
        responses={200: EntitySummarySerializer(many=True), **error_responses(400, 404)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        tags=["entities"],
        summary="Create an entity",
        description="Validated and versioned as the admin's save: every problem of the "
        "definition at once in `details` (`definition.<path>`), nothing saved. Needs the "
        "designer role in the workspace.",
        request=EntityCreateSerializer,
        examples=[
            OpenApiExample(
                "An action",
                value={"workspace": "acme", "definition": EXAMPLE_DEFINITION},
                request_only=True,
            )
        ],
        responses={
            201: EntitySavedSerializer,
            **error_responses(400, 403, 404, 415),
            **TOO_LARGE,
        },
    )
    def post(self, request: Request) -> Response:
        body = EntityCreateSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        workspace = body.validated_data["workspace"]
        _require_design(request.user, workspace, "create entities")
        try:
            result = entity_save(
                workspace=workspace, definition=body.validated_data["definition"], user=request.user
            )
        except DefinitionInvalid as invalid:
            raise exceptions.ValidationError(
                problem_details(invalid.problems, prefix="definition")
            ) from None
        return _saved(request, result, status_code=status.HTTP_201_CREATED)


class EntityDetail(APIView):
    @extend_schema(
        tags=["entities"],
        summary="One entity",
        responses={200: EntitySerializer, **error_responses(404)},
    )
    def get(self, request: Request, pk: Any) -> Response:
        entity = entity_get(user=request.user, pk=pk)
        return Response(EntitySerializer(entity, context={"request": request}).data)

    @extend_schema(
        tags=["entities"],
        summary="Save a new definition of an entity",
        description="The whole definition (what it leaves out takes the defaults). A change "
        "bumps the version (MAJOR when io_contract breaks, MINOR when capabilities are added, "
        "PATCH otherwise); the same definition keeps it (`saved_version` null). The type "
        "never changes. Needs the designer role.",
        request=EntityUpdateSerializer,
        responses={
            200: EntitySavedSerializer,
            **error_responses(400, 403, 404, 415),
            **TOO_LARGE,
        },
    )
    def put(self, request: Request, pk: Any) -> Response:
        entity = entity_get(user=request.user, pk=pk)
        _require_design(request.user, entity.workspace, "change entities")
        body = EntityUpdateSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        definition = body.validated_data["definition"]
        own_id = _own_id(definition)
        if own_id is not None and own_id not in {str(entity.pk), entity.ref}:
            raise exceptions.ValidationError(
                {
                    "definition.metadata.id": f'"{own_id}" is another entity\'s id; this '
                    f"entity's is {entity.ref} (or leave metadata.id out)"
                }
            )
        try:
            result = entity_save(
                workspace=entity.workspace, definition=definition, user=request.user, entity=entity
            )
        except DefinitionInvalid as invalid:
            raise exceptions.ValidationError(
                problem_details(invalid.problems, prefix="definition")
            ) from None
        return _saved(request, result)


def _own_id(definition: Any) -> str | None:
    if isinstance(definition, dict) and isinstance(definition.get("metadata"), dict):
        value = definition["metadata"].get("id")
        return None if value in (None, "") else str(value)
    return None


class EntityStatusMove(APIView):
    @extend_schema(
        tags=["entities"],
        summary="Move an entity to another status",
        description="The transition is checked and audited; a status the entity cannot move "
        "to from its current one (or has already) is a 409 CONFLICT naming the ones it can. "
        "Needs the designer role.",
        request=EntityStatusSerializer,
        responses={200: EntitySerializer, **error_responses(400, 403, 404, 409, 415)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        entity = entity_get(user=request.user, pk=pk)
        _require_design(request.user, entity.workspace, "change entities")
        body = EntityStatusSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            entity_set_status(
                entity=entity,
                status=body.validated_data["status"],
                user=request.user,
                reason=body.validated_data.get("reason", ""),
            )
        except DefinitionInvalid as invalid:
            # The status is one the schema lists; the entity's current one refuses it.
            raise Conflict(
                {"status": " ".join(problem.message for problem in invalid.problems)}
            ) from None
        entity = entity_get(user=request.user, pk=pk)
        return Response(EntitySerializer(entity, context={"request": request}).data)


class EntityClone(APIView):
    @extend_schema(
        tags=["entities"],
        summary="Create an entity from a template",
        description="A new entity in the template's workspace with a copy of its definition: "
        "a DRAFT named `name`, version 1.0.0 with a history of its own, not a template "
        "itself, audited as entity.created with what it was cloned from. Its children are the "
        "template's (`children: LINK`) or copies of them (`COPY`). A name that is taken (or a "
        "child's copy's, under `children`) is a 400 naming the field; an entity that is not a "
        "template (`metadata_extensions.ui_hints.is_template`), or whose definition no longer "
        "validates (`template.<path>`), is a 409 CONFLICT. Needs the designer role.",
        request=EntityCloneSerializer,
        examples=[OpenApiExample("A copy", value={"name": "summer_campaign"}, request_only=True)],
        responses={201: EntitySavedSerializer, **error_responses(400, 403, 404, 409, 415)},
    )
    def post(self, request: Request, pk: Any) -> Response:
        template = entity_get(user=request.user, pk=pk)
        _require_design(request.user, template.workspace, "create entities")
        body = EntityCloneSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = entity_clone(
                template=template,
                name=body.validated_data["name"],
                children=body.validated_data["children"],
                user=request.user,
            )
        except DefinitionInvalid as invalid:
            details = problem_details(invalid.problems, prefix="")
            if any(problem.path in ("name", "children") for problem in invalid.problems):
                raise exceptions.ValidationError(details) from None
            raise Conflict(details) from None
        return _saved(request, result, status_code=status.HTTP_201_CREATED)


@extend_schema(
    tags=["entities"],
    summary="An entity's version history",
    description="Newest first.",
    responses={200: EntityVersionSummarySerializer(many=True), **error_responses(400, 404)},
)
class EntityVersionList(generics.ListAPIView):
    serializer_class = EntityVersionSummarySerializer

    def get_queryset(self) -> QuerySet[EntityVersion]:
        entity = entity_get(user=self.request.user, pk=self.kwargs["pk"])
        return entity_version_list(entity=entity)


@extend_schema(
    tags=["entities"],
    summary="One version's snapshot",
    parameters=[VERSION_PARAMETER],
    responses={200: EntityVersionSerializer, **error_responses(404)},
)
class EntityVersionDetail(generics.RetrieveAPIView):
    serializer_class = EntityVersionSerializer

    def get_object(self) -> EntityVersion:
        entity = entity_get(user=self.request.user, pk=self.kwargs["pk"])
        return entity_version_get(entity=entity, version=self.kwargs["version"])


class EntityRollback(APIView):
    @extend_schema(
        tags=["entities"],
        summary="Restore a version as a new version",
        description="The snapshot is saved again through the same validation, as a new "
        "version (`saved_version`); the entity's status is kept. When the entity already "
        "matches the snapshot nothing is written and `saved_version` is null. Needs the "
        "designer role.",
        parameters=[VERSION_PARAMETER],
        request=None,
        responses={200: EntitySavedSerializer, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request, pk: Any, version: str) -> Response:
        entity = entity_get(user=request.user, pk=pk)
        snapshot = entity_version_get(entity=entity, version=version)
        _require_design(request.user, entity.workspace, "roll back entities")
        try:
            result = entity_rollback(version=snapshot, user=request.user)
        except DefinitionInvalid as invalid:
            raise exceptions.ValidationError(
                problem_details(invalid.problems, prefix="definition")
            ) from None
        return _saved(request, result)


def _workspace_of_url(request: Request, ref: str) -> Workspace:
    workspace = workspace_find(user=request.user, ref=ref)
    if workspace is None:
        raise exceptions.NotFound(f'no workspace "{ref}" among yours')
    return workspace


WORKSPACE_REF = OpenApiParameter(
    "ref",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=r"^[-a-zA-Z0-9_]{1,50}$",
    description="The workspace's id or slug.",
)


class WorkspaceExport(APIView):
    @extend_schema(
        tags=["entities"],
        summary="Export a workspace's entities",
        description="Every entity of the workspace, or one `root` and everything below it, "
        "in the exchange format; POST it to an import to restore or copy it.",
        parameters=[WORKSPACE_REF, ExportFilters],
        responses={200: ExportDocumentSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request, ref: str) -> Response:
        workspace = _workspace_of_url(request, ref)
        filters = ExportFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        root = None
        if "root" in filters.validated_data:
            wanted = filters.validated_data["root"]
            root = entity_find(workspace=workspace, ref=wanted)
            if root is None:
                # Not found, as an entity in the path would be: the schema cannot know which
                # entities exist, so a 400 would refuse a request it calls valid.
                raise exceptions.NotFound({"root": f'no entity "{wanted}" in {workspace.slug}'})
        return Response(export_workspace(workspace, root=root))


# What the import takes: an export document, or a list of definitions (or one definition).
IMPORT_REQUEST = {
    "application/json": {
        "oneOf": [
            {"$ref": "#/components/schemas/ExportDocument"},
            {"type": "array", "items": {"type": "object"}, "minItems": 1},
        ]
    }
}
IMPORT_EXAMPLE = OpenApiExample(
    "An export",
    value={
        "entities": [
            {
                **EXAMPLE_DEFINITION,
                "identity": {**EXAMPLE_DEFINITION["identity"], "name": "imported"},
            }
        ]
    },
    request_only=True,
)


class WorkspaceImport(APIView):
    @extend_schema(
        tags=["entities"],
        summary="Import definitions into a workspace",
        description='The body is an export (`{"entities": [...]}`), a list of definitions, '
        "or one definition. All or nothing: every problem of every definition comes back in "
        "`details` under `entities[i].<path>` and nothing is saved. A definition whose "
        "`metadata.id` (or, without one, whose name) matches an entity of the workspace "
        "updates it. Needs the designer role.",
        parameters=[WORKSPACE_REF],
        request=IMPORT_REQUEST,
        examples=[IMPORT_EXAMPLE],
        responses={
            200: ImportResultSerializer,
            **error_responses(400, 403, 404, 415),
            **TOO_LARGE,
        },
    )
    def post(self, request: Request, ref: str) -> Response:
        workspace = _workspace_of_url(request, ref)
        _require_design(request.user, workspace, "import entities")
        try:
            definitions = definitions_from_document(request.data)
        except ImportFileError as wrong:
            raise exceptions.ValidationError({"entities": str(wrong)}) from None
        if not definitions:
            raise exceptions.ValidationError({"entities": "the body holds no entity definitions"})
        try:
            results = entities_import(
                workspace=workspace, definitions=definitions, user=request.user
            )
        except DefinitionInvalid as invalid:
            raise exceptions.ValidationError(
                problem_details(invalid.problems, prefix="entities")
            ) from None
        created = sum(1 for result in results if result.created)
        updated = sum(1 for result in results if not result.created and result.version)
        entities = entity_list(user=request.user).filter(
            pk__in=[result.entity.pk for result in results]
        )
        by_pk = {entity.pk: entity for entity in entities}
        return Response(
            ImportResultSerializer(
                {
                    "workspace": workspace,
                    "imported": len(results),
                    "created": created,
                    "updated": updated,
                    "unchanged": len(results) - created - updated,
                    "entities": [by_pk[result.entity.pk] for result in results],
                }
            ).data
        )


@extend_schema(
    tags=["entities"],
    summary="Your workspaces",
    description="Each with your roles and what they let you do.",
    responses={200: WorkspaceSerializer(many=True), **error_responses(400, 404)},
)
class WorkspaceList(generics.ListAPIView):
    serializer_class = WorkspaceSerializer

    def get_queryset(self) -> QuerySet[Workspace]:
        return workspaces_for(self.request.user).order_by("name", "pk")

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        roles: dict[int, list[str]] = {}
        user = self.request.user
        if user.is_authenticated:
            allowed_workspace_ids(user)  # one read of the user's permissions, kept on the user
            rows = Membership.objects.filter(user=user).values_list("workspace_id", "role")
            for workspace_id, role in rows:
                roles.setdefault(workspace_id, []).append(role)
        context["roles"] = roles
        return context


# Django's own UUID converter's pattern.
UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

# Exact addresses, no trailing-slash catch-alls: runs/api.py adds entities/<id>/execute.
urlpatterns = [
    path("entities", EntityList.as_view(), name="entity-list"),
    path("entities/<uuid:pk>", EntityDetail.as_view(), name="entity-detail"),
    path("entities/<uuid:pk>/status", EntityStatusMove.as_view(), name="entity-status"),
    path("entities/<uuid:pk>/clone", EntityClone.as_view(), name="entity-clone"),
    path("entities/<uuid:pk>/versions", EntityVersionList.as_view(), name="entity-versions"),
    re_path(
        r"^entities/(?P<pk>" + UUID + r")/versions/(?P<version>[0-9]+\.[0-9]+\.[0-9]+)$",
        EntityVersionDetail.as_view(),
        name="entity-version",
    ),
    re_path(
        r"^entities/(?P<pk>" + UUID + r")/versions/(?P<version>[0-9]+\.[0-9]+\.[0-9]+)"
        r"/rollback$",
        EntityRollback.as_view(),
        name="entity-rollback",
    ),
    path("workspaces", WorkspaceList.as_view(), name="workspace-list"),
    re_path(
        r"^workspaces/(?P<ref>[-a-zA-Z0-9_]{1,50})/export$",
        WorkspaceExport.as_view(),
        name="workspace-export",
    ),
    re_path(
        r"^workspaces/(?P<ref>[-a-zA-Z0-9_]{1,50})/import$",
        WorkspaceImport.as_view(),
        name="workspace-import",
    ),
]
