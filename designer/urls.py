from __future__ import annotations

from django.urls import path

from designer.views import editor, tool_picker, tree, workspaces

app_name = "designer"

urlpatterns = [
    path("", workspaces.index, name="index"),
    path(
        "models/<str:kind>/",
        editor.model_suggestions,
        name="model_suggestions",
    ),
    path("<slug:workspace>/", tree.tree, name="tree"),
    path("<slug:workspace>/tools/", tool_picker.tool_picker, name="tool_picker"),
    path("<slug:workspace>/entities/new/", editor.entity, name="entity_new"),
    path("<slug:workspace>/entities/new/check/", editor.entity_check, name="entity_new_check"),
    path("<slug:workspace>/entities/new/json/", editor.entity_json, name="entity_new_json"),
    path("<slug:workspace>/entities/<uuid:pk>/", editor.entity, name="entity"),
    path("<slug:workspace>/entities/<uuid:pk>/check/", editor.entity_check, name="entity_check"),
    path("<slug:workspace>/entities/<uuid:pk>/json/", editor.entity_json, name="entity_json"),
    path("<slug:workspace>/entities/<uuid:pk>/status/", editor.entity_status, name="entity_status"),
]
