"""The console's account pages: the user's API tokens."""

from __future__ import annotations

from django.urls import path

from governance import views

app_name = "account"

urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
]
