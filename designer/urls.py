from __future__ import annotations

from django.urls import path

from designer.views import tree, versions, workspaces

app_name = "designer"

urlpatterns = [
    path("", workspaces.index, name="index"),
    path("<slug:workspace>/", tree.tree, name="tree"),
    path("<slug:workspace>/entities/<uuid:pk>/versions/", versions.versions, name="versions"),
]
