"""The tools API (issue 6): the tool registries of your workspaces, read only.

A tool's `authentication` shows only its kind and the name of the vault secret it uses
(`credentials_ref`), never a secret: the secret itself lives in the vault and no endpoint
reads it. A tool of another workspace is a 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.urls import path, reverse
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers

from config.api_contract import error_responses
from config.api_lists import ChoicesFilter, FilteredListAPIView, ListFilters
from entities.serializers import WorkspaceRefSerializer
from tools.models import Tool, ToolPermission
from tools.selectors import tool_get, tool_list

AUTHENTICATION_KINDS = ["NONE", "API_KEY", "OAUTH2", "SERVICE_ACCOUNT"]


class ToolAuthenticationSerializer(serializers.Serializer):
    type = serializers.ChoiceField(
        choices=AUTHENTICATION_KINDS, help_text="How the tool authenticates."
    )
    credentials_ref = serializers.CharField(
        allow_null=True,
        help_text="The name of the workspace's vault secret the tool uses; never the secret.",
    )


class ToolSummarySerializer(serializers.ModelSerializer):
    """A tool as the list shows it."""

    url = serializers.SerializerMethodField(help_text="This tool in the API.")
    workspace = WorkspaceRefSerializer(read_only=True)
    permissions = serializers.ChoiceField(
        choices=ToolPermission.choices,
        read_only=True,
        help_text="READ, WRITE (side effects, replayed at most once) or EXECUTE (needs a "
        "grant per user).",
    )
    implementation = serializers.CharField(
        allow_null=True,
        read_only=True,
        help_text="The built-in adapter that runs it; null: declared, cannot run yet.",
    )

    class Meta:
        model = Tool
        fields = [
            "id",
            "url",
            "workspace",
            "tool_id",
            "name",
            "description",
            "provider",
            "permissions",
            "sandbox_mode",
            "implementation",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_url(self, tool: Tool) -> str:
        return reverse("api:tool-detail", args=[tool.pk])


class ToolSerializer(ToolSummarySerializer):
    """One tool: its function schema, output schema, rate limit and authentication."""

    authentication = serializers.SerializerMethodField()
    function_schema = serializers.DictField(
        read_only=True, help_text="What the model sees: name, description, JSON Schema."
    )
    output_schema = serializers.DictField(
        allow_null=True, read_only=True, help_text="What the tool answers, when declared."
    )
    rate_limit = serializers.DictField(read_only=True)

    class Meta(ToolSummarySerializer.Meta):
        fields = [
            *ToolSummarySerializer.Meta.fields,
            "function_schema",
            "output_schema",
            "rate_limit",
            "authentication",
        ]
        read_only_fields = fields

    @extend_schema_field(ToolAuthenticationSerializer)
    def get_authentication(self, tool: Tool) -> dict[str, Any]:
        # Only these two keys, whatever else a stored definition might hold.
        given = tool.authentication if isinstance(tool.authentication, dict) else {}
        return {
            "type": given.get("type") or "NONE",
            "credentials_ref": given.get("credentials_ref") or None,
        }


class ToolFilters(ListFilters):
    """The list's query string."""

    workspace = serializers.CharField(required=False, help_text="A workspace's id or slug.")
    permission = ChoicesFilter(
        choices=ToolPermission.values,
        noun="permission",
        help_text="One or more permissions, repeated or comma-separated, in any case.",
    )
    provider = serializers.CharField(
        required=False, max_length=50, help_text="Exactly this provider (internal, …)."
    )
    q = serializers.CharField(
        required=False, max_length=200, help_text="Words in the tool id, name or description."
    )

    def narrow(self, tools: QuerySet[Tool]) -> QuerySet[Tool]:
        filters = self.validated_data
        if "workspace" in filters:
            tools = tools.filter(workspace=filters["workspace"])
        if "permission" in filters:
            tools = tools.filter(permissions__in=filters["permission"])
        if "provider" in filters:
            tools = tools.filter(provider=filters["provider"])
        for word in filters.get("q", "").split():
            tools = tools.filter(
                Q(tool_id__icontains=word)
                | Q(name__icontains=word)
                | Q(description__icontains=word)
            )
        return tools


@extend_schema(
    tags=["tools"],
    summary="Tools of your workspaces",
    description="In tool id order; filters narrow it.",
    parameters=[ToolFilters],
    responses={200: ToolSummarySerializer(many=True), **error_responses(400, 404)},
)
class ToolList(FilteredListAPIView):
    serializer_class = ToolSummarySerializer
    filters_class = ToolFilters

    def get_queryset(self) -> QuerySet[Tool]:
        # A total order: the same tool id may be in several workspaces.
        return tool_list(user=self.request.user).order_by("tool_id", "workspace__slug", "pk")


@extend_schema(
    tags=["tools"],
    summary="One tool",
    responses={200: ToolSerializer, **error_responses(404)},
)
class ToolDetail(generics.RetrieveAPIView):
    serializer_class = ToolSerializer

    def get_object(self) -> Tool:
        return tool_get(user=self.request.user, pk=self.kwargs["pk"])


urlpatterns = [
    path("tools", ToolList.as_view(), name="tool-list"),
    path("tools/<int:pk>", ToolDetail.as_view(), name="tool-detail"),
]
