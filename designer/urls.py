from __future__ import annotations

from django.urls import path

from designer.views import tree, workspaces

app_name = "designer"

urlpatterns = [
    path("", workspaces.index, name="index"),
    path("<slug:workspace>/", tree.tree, name="tree"),
    path("<slug:workspace>/tree/search/", tree.search, name="tree_search"),
    path("<slug:workspace>/tree/<uuid:pk>/children/", tree.children, name="tree_children"),
    path("<slug:workspace>/tree/<uuid:pk>/candidates/", tree.candidates, name="tree_candidates"),
    path("<slug:workspace>/tree/<uuid:pk>/link/", tree.link, name="tree_link"),
    path("<slug:workspace>/tree/<uuid:pk>/create/", tree.create, name="tree_create"),
    path("<slug:workspace>/tree/<uuid:pk>/unlink/", tree.unlink, name="tree_unlink"),
    path("<slug:workspace>/tree/<uuid:pk>/reorder/", tree.reorder, name="tree_reorder"),
]
