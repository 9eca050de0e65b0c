"""The walk over a run's descendants, level by level: one implementation for the stores and
the run services, each giving its own way to find the children of some runs."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

Id = TypeVar("Id", bound=Hashable)


def descendants(root: Id, children_of: Callable[[list[Id]], list[Id]]) -> list[Id]:
    """Every run below `root`, nearest first; `children_of(ids)` answers the runs whose
    parent is one of `ids` (a store may leave out finished ones: the walk stops there)."""
    found: list[Id] = []
    frontier = [root]
    while frontier:
        frontier = children_of(frontier)
        found.extend(frontier)
    return found
