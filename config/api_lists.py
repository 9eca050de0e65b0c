"""Lists under /api/v1/: a query string validated like a body (`ListFilters`: unknown
parameters named, bad values named) and applied by a generic list view
(`FilteredListAPIView`), with the validators the lists share.

Apart from `config/api_contract.py`, which DRF imports while it defines its generic views
(the view here would import it back, in a circle)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rest_framework import generics, serializers

from config.api_contract import StrictSerializer


class ListFilters(StrictSerializer):
    """A list's query string: what it narrows by, validated like a body (unknown parameters
    named), then applied by `narrow`. The pagination's parameters are not its business."""

    passed_over = frozenset({"page", "page_size", "format"})

    def narrow(self, queryset: Any) -> Any:
        raise NotImplementedError


class FilteredListAPIView(generics.ListAPIView):
    """A list whose query string `filters_class` validates and applies."""

    filters_class: type[ListFilters]

    def filter_queryset(self, queryset: Any) -> Any:
        filters = self.filters_class(
            data=self.request.query_params.dict(), context=self.get_serializer_context()
        )
        filters.is_valid(raise_exception=True)
        return filters.narrow(queryset)


def comma_choices(value: str, choices: Sequence[str], noun: str) -> list[str]:
    """A filter of one or more comma-separated values, any case: `failed,cancelled`."""
    wanted = [part.strip().upper() for part in value.split(",") if part.strip()]
    wrong = [part for part in wanted if part not in choices]
    if wrong or not wanted:
        raise serializers.ValidationError(
            f"{', '.join(wrong) or 'nothing'} is not a {noun}; use " + ", ".join(choices)
        )
    return wanted


def workspace_among_yours(user: Any, ref: str) -> Any:
    """The user's workspace of a filter or body (id or slug); one they cannot see is refused
    exactly like one that does not exist."""
    from entities.selectors import workspace_find

    workspace = workspace_find(user=user, ref=ref)
    if workspace is None:
        raise serializers.ValidationError(f'no workspace "{ref}" among yours')
    return workspace
