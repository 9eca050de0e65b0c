"""The API's serializers that more than one app's api.py uses: how a workspace and an entity
are referred to inside another resource (an approval, a run, a tool). One home, below every
api.py that nests them."""

from __future__ import annotations

from rest_framework import serializers

from entities.models import Entity, Workspace


class WorkspaceRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Workspace
        fields = ["id", "slug", "name"]
        read_only_fields = fields


class EntityRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Entity
        fields = ["id", "name", "type"]
        read_only_fields = fields
