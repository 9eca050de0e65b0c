from __future__ import annotations

from django.urls import path

from designer.views import (
    cloning,
    editor,
    pickers,
    tool_picker,
    tree,
    trial,
    versions,
    workspaces,
)

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
    path("<slug:workspace>/pick/children/", pickers.children, name="pick_children"),
    path("<slug:workspace>/entities/new/", editor.entity, name="entity_new"),
    path("<slug:workspace>/entities/new/check/", editor.entity_check, name="entity_new_check"),
    path("<slug:workspace>/entities/new/json/", editor.entity_json, name="entity_new_json"),
    path("<slug:workspace>/entities/<uuid:pk>/", editor.entity, name="entity"),
    path("<slug:workspace>/entities/<uuid:pk>/check/", editor.entity_check, name="entity_check"),
    path("<slug:workspace>/entities/<uuid:pk>/json/", editor.entity_json, name="entity_json"),
    path("<slug:workspace>/entities/<uuid:pk>/status/", editor.entity_status, name="entity_status"),
    path("<slug:workspace>/entities/<uuid:pk>/try/", trial.entity_try, name="entity_try"),
    path(
        "<slug:workspace>/entities/<uuid:pk>/clone/",
        cloning.entity_clone_view,
        name="entity_clone",
    ),
    path(
        "<slug:workspace>/entities/<uuid:pk>/try/<uuid:run>/",
        trial.entity_try_result,
        name="entity_try_result",
    ),
    path("<slug:workspace>/tree/search/", tree.search, name="tree_search"),
    path("<slug:workspace>/tree/<uuid:pk>/children/", tree.children, name="tree_children"),
    path("<slug:workspace>/tree/<uuid:pk>/candidates/", tree.candidates, name="tree_candidates"),
    path("<slug:workspace>/tree/<uuid:pk>/link/", tree.link, name="tree_link"),
    path("<slug:workspace>/tree/<uuid:pk>/create/", tree.create, name="tree_create"),
    path("<slug:workspace>/tree/<uuid:pk>/unlink/", tree.unlink, name="tree_unlink"),
    path("<slug:workspace>/tree/<uuid:pk>/reorder/", tree.reorder, name="tree_reorder"),
    path("<slug:workspace>/entities/<uuid:pk>/versions/", versions.versions, name="versions"),
]
