"""Lists under /api/v1/: a query string validated like a body (`ListFilters`: unknown
parameters named, bad values named) and applied by a generic list view
(`FilteredListAPIView`), with the validators the lists share.

Apart from `config/api_contract.py`, which DRF imports while it defines its generic views
(the view here would import it back, in a circle)."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict
from rest_framework import exceptions, generics, serializers

from config.api_contract import StrictSerializer
from entities.selectors import workspace_find


class ListFilters(StrictSerializer):
    """A list's query string: what it narrows by, validated like a body (unknown parameters
    named), then applied by `narrow`. The pagination's parameters are not its business."""

    passed_over = frozenset({"page", "page_size", "format"})

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        # Once the query is well formed (a 400 names everything wrong with it first): the
        # workspace it names, or 404.
        if "workspace" in data:
            data["workspace"] = workspace_among_yours(
                self.context["request"].user, data["workspace"]
            )
        return data

    def narrow(self, queryset: Any) -> Any:
        raise NotImplementedError


class FilteredListAPIView(generics.ListAPIView):
    """A list whose query string `filters_class` validates and applies."""

    filters_class: type[ListFilters]

    def filter_queryset(self, queryset: Any) -> Any:
        filters = self.filters_class(
            data=query_values(self.request.query_params, self.filters_class),
            context=self.get_serializer_context(),
        )
        filters.is_valid(raise_exception=True)
        return filters.narrow(queryset)


def query_values(query: QueryDict, filters_class: type[serializers.Serializer]) -> dict[str, Any]:
    """The query string as a filter serializer reads it: the last value of each parameter,
    every value of a filter that takes several (`?status=FAILED&status=CANCELLED`)."""
    data: dict[str, Any] = query.dict()
    for name, field in filters_class().fields.items():
        if isinstance(field, serializers.MultipleChoiceField) and name in query:
            data[name] = query.getlist(name)
    return data


class ChoicesFilter(serializers.MultipleChoiceField):
    """A filter by one or more UPPER_CASE values, in any case, repeated
    (`?status=FAILED&status=CANCELLED`) or comma-separated (`?status=failed,cancelled`).

    The schema lists the values (an array of an enum, as drf-spectacular maps a multiple
    choice), so a client and schemathesis know which ones the API takes."""

    def __init__(self, *, noun: str, **kwargs: Any) -> None:
        self.noun = noun
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_empty", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        given = [data] if isinstance(data, str) else data
        if not isinstance(given, list | tuple) or not all(isinstance(v, str) for v in given):
            raise serializers.ValidationError(f"one or more of {', '.join(self.choices)}")
        wanted = [part.strip().upper() for value in given for part in value.split(",")]
        wanted = [part for part in wanted if part]
        wrong = [part for part in wanted if part not in self.choices]
        if wrong or not wanted:
            raise serializers.ValidationError(
                f"{', '.join(wrong) or 'nothing'} is not a {self.noun}; use "
                + ", ".join(self.choices)
            )
        return list(dict.fromkeys(wanted))

    def to_representation(self, value: Any) -> list[str]:
        return list(value)


def workspace_among_yours(user: Any, ref: str, field: str = "workspace") -> Any:
    """The user's workspace of a filter or body (id or slug); one they cannot see is refused
    exactly like one that does not exist: 404, as for a workspace in the path. (A 400 would
    refuse a request the schema calls valid: no schema can know which workspaces exist.)"""
    workspace = workspace_find(user=user, ref=ref)
    if workspace is None:
        raise exceptions.NotFound({field: f'no workspace "{ref}" among yours'})
    return workspace
