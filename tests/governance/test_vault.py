"""The credential vault (governance/vault.py): encryption at rest, resolving a tool's
credentials_ref, key rotation, clear errors, and a planted secret that must not surface in
the admin, an export, the audit log, the logs, an error or a repr.

ada administers Acme, alice designs in Acme, charlie designs in Globex.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.views.debug import SafeExceptionReporterFilter

from entities.exchange import export_workspace
from governance.models import AuditRecord, Secret
from governance.vault import (
    Redacted,
    SecretInvalid,
    SecretNotFound,
    SecretUndecryptable,
    derived_key,
    secret_delete,
    secret_resolve,
    secret_set,
    vault_rotate,
)
from tests.factories import EntityFactory, UserFactory, grant, make_tool

# The planted secret: if it shows up anywhere below, the vault leaked it.
PLANTED = "sk-planted-7f3a9c1e5b2d4f60a8c9e1d3b5f7a9c2"
KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()


@pytest.fixture
def ada(acme):
    return grant(UserFactory(username="ada"), acme, "admin")


@pytest.fixture
def keys(settings):
    """Set HIERARCH_VAULT_KEYS for the test: `keys("B", "A")`."""
    named = {"A": KEY_A, "B": KEY_B}

    def use(*names: str) -> None:
        settings.HIERARCH_VAULT_KEYS = [named.get(name, name) for name in names]

    return use


@pytest.fixture
def planted(acme, ada):
    return secret_set(workspace=acme, name="nlp_api_key", value=PLANTED, kind="API_KEY", user=ada)


def leaks(text: str) -> bool:
    return PLANTED in text or PLANTED.encode().hex() in text


# Encryption at rest and resolving


def test_a_secret_is_stored_encrypted_and_resolves_to_its_value(acme, planted):
    stored = Secret.objects.get(pk=planted.pk)

    assert not leaks(stored.ciphertext)
    assert PLANTED.encode() not in base64.urlsafe_b64decode(stored.ciphertext)
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED
    assert secret_resolve(workspace_id=acme.pk, ref="nlp_api_key") == PLANTED


def test_the_plain_value_never_reaches_the_database(acme, ada):
    with CaptureQueriesContext(connection) as queries:
        secret_set(workspace=acme, name="nlp_api_key", value=PLANTED, user=ada)
        secret_resolve(acme.pk, "nlp_api_key")

    assert not leaks(json.dumps([query["sql"] for query in queries.captured_queries]))


def test_setting_a_secret_again_replaces_its_value_and_kind(acme, ada, planted):
    secret_set(workspace=acme, name="nlp_api_key", value="replaced", kind="GENERIC", user=ada)

    secret = Secret.objects.get(workspace=acme)
    assert (secret.pk, secret.kind) == (planted.pk, "GENERIC")
    assert secret_resolve(acme.pk, "nlp_api_key") == "replaced"
    first, second = AuditRecord.objects.filter(action="secret.set").order_by("seq")
    assert first.after == {"name": "nlp_api_key", "kind": "API_KEY", "replaced": False}
    assert second.before == {"name": "nlp_api_key", "kind": "API_KEY"}
    assert second.after == {"name": "nlp_api_key", "kind": "GENERIC", "replaced": True}
    assert second.actor == ada


def test_a_redacted_value_can_be_set(acme):
    secret_set(workspace=acme, name="token", value=Redacted(PLANTED))

    assert secret_resolve(acme.pk, "token") == PLANTED


def test_a_reference_that_names_no_secret_is_not_found_by_name(acme, planted):
    with pytest.raises(SecretNotFound) as missing:
        secret_resolve(acme.pk, "nlp_api_kee")

    message = str(missing.value)
    assert "there is no secret 'nlp_api_kee' in workspace 'acme'" in message
    assert "credentials_ref" in message
    assert missing.value.ref == "nlp_api_kee"
    assert missing.value.code == "SECRET_NOT_FOUND"
    assert not leaks(message)


@pytest.mark.parametrize("ref", [None, "", 42])
def test_an_empty_reference_is_not_found_with_the_reason(acme, ref):
    with pytest.raises(SecretNotFound, match=f"credentials_ref is {ref!r}"):
        secret_resolve(acme.pk, ref)


def test_another_workspaces_secret_is_not_found(acme, globex, planted):
    with pytest.raises(SecretNotFound, match="in workspace 'globex'"):
        secret_resolve(globex.pk, "nlp_api_key")


@pytest.mark.parametrize(
    ("name", "value", "kind", "problem"),
    [
        ("has space", PLANTED, "API_KEY", "'has space' is not a secret name"),
        ("-leading", PLANTED, "API_KEY", "'-leading' is not a secret name"),
        ("x" * 201, PLANTED, "API_KEY", "is not a secret name"),
        ("ok_name", PLANTED, "PASSWORD", "'PASSWORD' is not a kind of secret; use one of"),
        ("ok_name", "   ", "API_KEY", "the value of secret 'ok_name' is empty"),
        ("ok_name", 12345, "API_KEY", "the value of secret 'ok_name' must be text"),
        (
            "ok_name",
            PLANTED * 2000,
            "API_KEY",
            "the value of secret 'ok_name' is 86,000 characters; the vault holds values of up "
            "to 65,536",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_problem_and_never_the_value(
    acme, name, value, kind, problem
):
    with pytest.raises(SecretInvalid) as refused:
        secret_set(workspace=acme, name=name, value=value, kind=kind)

    assert problem in str(refused.value)
    assert not leaks(str(refused.value))
    assert not Secret.objects.exists()


def test_a_deleted_secret_is_gone_and_audited_by_name(acme, ada, planted):
    secret_delete(secret=planted, user=ada)

    assert not Secret.objects.exists()
    with pytest.raises(SecretNotFound):
        secret_resolve(acme.pk, "nlp_api_key")
    record = AuditRecord.objects.filter(action="secret.deleted").get()
    assert (record.before, record.actor) == ({"name": "nlp_api_key", "kind": "API_KEY"}, ada)


def test_a_ciphertext_copied_onto_another_secret_does_not_decrypt(acme, globex, planted):
    theirs = secret_set(workspace=globex, name="nlp_api_key", value="globex value")
    Secret.objects.filter(pk=theirs.pk).update(ciphertext=planted.ciphertext)

    with pytest.raises(SecretUndecryptable, match="belongs to another secret") as refused:
        secret_resolve(globex.pk, "nlp_api_key")
    assert not leaks(str(refused.value))


# Keys and rotation


def test_rotation_re_encrypts_with_the_newest_key_so_the_old_one_can_go(acme, keys):
    keys("A")
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)
    secret_set(workspace=acme, name="webhook", value="https://hooks.example/1", kind="WEBHOOK_URL")
    before = dict(Secret.objects.values_list("name", "ciphertext"))

    keys("B", "A")
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED  # the old key still decrypts
    assert vault_rotate() == 2
    keys("B")

    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED
    assert secret_resolve(acme.pk, "webhook") == "https://hooks.example/1"
    after = dict(Secret.objects.values_list("name", "ciphertext"))
    assert all(after[name] != before[name] for name in before)
    assert Secret.objects.filter(rotated_at__isnull=True).count() == 0
    rotated = AuditRecord.objects.filter(action="secret.rotated").order_by("seq")
    assert [(r.object_label, r.after) for r in rotated] == [
        ("nlp_api_key", {"name": "nlp_api_key", "kind": "GENERIC"}),
        ("webhook", {"name": "webhook", "kind": "WEBHOOK_URL"}),
    ]


def test_without_the_key_a_secret_was_saved_with_the_error_names_it(acme, keys):
    keys("A")
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)
    keys("B")

    with pytest.raises(SecretUndecryptable) as refused:
        secret_resolve(acme.pk, "nlp_api_key")

    message = str(refused.value)
    assert "secret 'nlp_api_key' cannot be decrypted with the configured vault keys" in message
    assert "HIERARCH_VAULT_KEYS" in message
    assert not leaks(message) and not leaks(repr(refused.value))
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_rotation_refuses_when_a_secret_cannot_be_decrypted_and_changes_nothing(acme, keys):
    keys("A")
    secret_set(workspace=acme, name="first", value="one")
    keys("B")
    secret_set(workspace=acme, name="second", value="two")
    before = dict(Secret.objects.values_list("name", "ciphertext"))

    with pytest.raises(SecretUndecryptable, match="secret 'first' of workspace .* nothing was"):
        vault_rotate()

    assert dict(Secret.objects.values_list("name", "ciphertext")) == before
    assert not AuditRecord.objects.filter(action="secret.rotated").exists()


def test_rotate_vault_key_prints_a_count_and_never_a_value(acme, keys):
    keys("A")
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)
    keys("B", "A")
    out = StringIO()

    call_command("rotate_vault_key", stdout=out)

    assert out.getvalue() == "re-encrypted 1 secret with the newest vault key\n"
    keys("B")
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED


def test_rotate_vault_key_reports_an_undecryptable_secret_as_a_command_error(acme, keys):
    keys("A")
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)
    keys("B")

    with pytest.raises(CommandError, match="secret 'nlp_api_key'") as failed:
        call_command("rotate_vault_key", stdout=StringIO())
    assert not leaks(str(failed.value))


def test_without_configured_keys_the_key_is_derived_from_secret_key(acme, settings):
    settings.HIERARCH_VAULT_KEYS = []
    old_secret_key = settings.SECRET_KEY
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)
    assert Fernet(derived_key(old_secret_key)).decrypt(
        Secret.objects.get().ciphertext.encode()
    )  # sealed with the derived key

    settings.SECRET_KEY = "a-new-secret-key-" + "n" * 40
    with pytest.raises(SecretUndecryptable, match="'nlp_api_key'"):
        secret_resolve(acme.pk, "nlp_api_key")

    # Django's way of rotating SECRET_KEY: the old one as a fallback; then rotate the vault.
    settings.SECRET_KEY_FALLBACKS = [old_secret_key]
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED
    assert vault_rotate() == 1
    settings.SECRET_KEY_FALLBACKS = []
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED


def test_moving_from_the_derived_key_to_configured_keys_is_a_rotation(acme, keys, settings):
    keys()
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)
    keys("A")
    vault_rotate()

    settings.SECRET_KEY = "another-secret-key-" + "m" * 40  # the derived key changes
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED


def test_a_configured_key_that_is_not_a_fernet_key_is_named_by_position(acme, keys):
    keys("A", "not-a-fernet-key")

    with pytest.raises(ImproperlyConfigured) as refused:
        secret_set(workspace=acme, name="nlp_api_key", value=PLANTED)

    assert "HIERARCH_VAULT_KEYS: key 2 of 2 is not a Fernet key" in str(refused.value)
    assert "not-a-fernet-key" not in str(refused.value)
    assert not Secret.objects.exists()


# The Redacted guard and reprs


def test_redacted_shows_a_placeholder_wherever_it_is_printed():
    value = Redacted(PLANTED, "api key")
    shown = [
        str(value),
        repr(value),
        f"{value}",
        f"{value!r}",
        "%s" % value,  # noqa: UP031 - the old style is what logging uses
        "{}".format(value),  # noqa: UP032
        repr({"headers": value}),
        repr([value]),
    ]

    assert not any(leaks(text) for text in shown)
    assert str(value) == "[api key: redacted]"
    assert value.reveal() == PLANTED
    assert value == Redacted(PLANTED) and value != Redacted("other")


def test_redacted_refuses_to_be_pickled_so_it_never_lands_in_a_cache_or_a_message():
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(Redacted(PLANTED))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps({"nested": [Redacted(PLANTED)]})


def test_no_repr_or_string_of_a_secret_shows_its_value(acme, planted):
    shown = [str(planted), repr(planted), repr(Secret.objects.all()), str(planted.__dict__)]

    assert not any(leaks(text) for text in shown)
    assert repr(planted) == f"<Secret 'nlp_api_key' (API_KEY) of workspace {acme.pk}>"


# Where a planted secret must not surface


def test_exports_of_entities_using_a_secret_name_it_and_never_show_its_value(acme, planted):
    make_tool(
        acme,
        "nlp_api",
        authentication={"type": "API_KEY", "credentials_ref": "nlp_api_key"},
    )
    EntityFactory(workspace=acme, name="analyst", tools=[{"tool_id": "nlp_api"}])

    exported = json.dumps(export_workspace(acme))
    out = StringIO()
    call_command("export_entities", workspace="acme", stdout=out)

    assert '"credentials_ref": "nlp_api_key"' in exported
    assert not leaks(exported)
    assert '"credentials_ref": "nlp_api_key"' in out.getvalue()
    assert not leaks(out.getvalue())


def test_the_audit_log_names_secrets_and_never_holds_a_value(acme, ada, keys, planted):
    keys("B")
    vault_rotate()
    secret_set(workspace=acme, name="nlp_api_key", value=PLANTED + "-2", user=ada)
    secret_delete(secret=Secret.objects.get(), user=ada)

    rows = list(AuditRecord.objects.filter(action__startswith="secret.").values())
    assert [row["action"] for row in rows] == [
        "secret.set",
        "secret.rotated",
        "secret.set",
        "secret.deleted",
    ]
    assert not leaks(json.dumps(rows, default=str))


def test_nothing_the_vault_does_logs_a_value(acme, ada, keys, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    keys("A")
    with CaptureQueriesContext(connection):  # SQL with its parameters goes to the log too
        secret_set(workspace=acme, name="nlp_api_key", value=PLANTED, user=ada)
        assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED
        keys("B", "A")
        vault_rotate()
        keys("B")
        with pytest.raises(SecretNotFound):
            secret_resolve(acme.pk, "missing")
        keys("A")
        with pytest.raises(SecretUndecryptable):
            secret_resolve(acme.pk, "nlp_api_key")

    assert "nlp_api_key" in caplog.text  # the log names it...
    assert "governance_secret" in caplog.text  # ...and the SQL was captured...
    assert not leaks(caplog.text)  # ...but never shows the value


# The admin


@pytest.fixture
def as_ada(client, ada):
    client.force_login(ada)
    return client


def changelist():
    return reverse("admin:governance_secret_changelist")


def change_url(secret: Secret) -> str:
    return reverse("admin:governance_secret_change", args=[secret.pk])


def test_the_admin_list_shows_name_kind_and_update_never_the_value(as_ada, planted):
    response = as_ada.get(changelist())

    assert response.status_code == 200
    assert b"nlp_api_key" in response.content
    assert b"API key" in response.content
    assert not leaks(response.content.decode())
    assert planted.ciphertext.encode() not in response.content


def test_the_change_page_never_renders_the_value_back(as_ada, planted):
    response = as_ada.get(change_url(planted))
    page = response.content.decode()

    assert response.status_code == 200
    assert 'type="password"' in page
    assert 'name="value"' in page
    assert "New value" in page
    assert not leaks(page)
    assert planted.ciphertext not in page
    # Not even a masked value: the password input carries no value attribute at all.
    password_input = page[page.index('name="value"') - 200 : page.index('name="value"') + 200]
    assert "value=" not in password_input.replace('name="value"', "")


def test_a_secret_added_in_the_admin_is_encrypted_and_never_shown_again(as_ada, acme, caplog):
    caplog.set_level(logging.DEBUG)
    response = as_ada.post(
        reverse("admin:governance_secret_add"),
        {"workspace": acme.pk, "name": "nlp_api_key", "kind": "API_KEY", "value": PLANTED},
        follow=True,
    )

    assert response.status_code == 200
    assert not leaks(response.content.decode())
    secret = Secret.objects.get()
    assert secret.created_by.username == "ada"
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED
    assert not leaks(as_ada.get(change_url(secret)).content.decode())
    history = as_ada.get(reverse("admin:governance_secret_history", args=[secret.pk]))
    assert not leaks(history.content.decode())
    assert not leaks(caplog.text)


def test_an_error_report_of_a_secret_form_hides_the_posted_value(as_ada, acme):
    response = as_ada.post(
        reverse("admin:governance_secret_add"),
        {"workspace": acme.pk, "name": "nlp_api_key", "kind": "API_KEY", "value": PLANTED},
    )

    # What Django's error report (a 500 page with DEBUG, the mail to ADMINS) would show.
    shown = SafeExceptionReporterFilter().get_post_parameters(response.wsgi_request)
    assert shown["name"] == "nlp_api_key"
    assert not leaks(str(dict(shown)))


def test_a_refused_add_does_not_echo_the_value(as_ada, acme, planted):
    response = as_ada.post(
        reverse("admin:governance_secret_add"),
        {"workspace": acme.pk, "name": "nlp_api_key", "kind": "API_KEY", "value": PLANTED},
    )

    assert response.status_code == 200  # the form again, with the problem
    assert b"already exists" in response.content
    assert not leaks(response.content.decode())
    bad_name = as_ada.post(
        reverse("admin:governance_secret_add"),
        {"workspace": acme.pk, "name": "has space", "kind": "API_KEY", "value": PLANTED},
    )
    assert b"letters, digits" in bad_name.content
    assert not leaks(bad_name.content.decode())


def test_the_change_page_replaces_the_value(as_ada, acme, planted):
    response = as_ada.post(
        change_url(planted), {"kind": "SERVICE_ACCOUNT", "value": "the-new-value"}, follow=True
    )

    assert response.status_code == 200
    assert secret_resolve(acme.pk, "nlp_api_key") == "the-new-value"
    assert Secret.objects.get().kind == "SERVICE_ACCOUNT"
    assert b"the-new-value" not in response.content
    assert not leaks(response.content.decode())


def test_the_change_page_needs_the_new_value_and_keeps_the_old_one_without_it(
    as_ada, acme, planted
):
    response = as_ada.post(change_url(planted), {"kind": "GENERIC", "value": ""})

    assert response.status_code == 200
    assert b"This field is required" in response.content
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED
    assert Secret.objects.get().kind == "API_KEY"


def test_a_secret_deleted_in_the_admin_goes_through_the_vault(as_ada, acme, planted):
    url = reverse("admin:governance_secret_delete", args=[planted.pk])

    confirm = as_ada.get(url)
    as_ada.post(url, {"post": "yes"})

    assert not leaks(confirm.content.decode())
    assert not Secret.objects.exists()
    assert AuditRecord.objects.filter(action="secret.deleted", actor_name="ada").exists()


@pytest.mark.parametrize("persona", ["alice", "charlie"])
def test_only_workspace_admins_see_or_change_secrets(request, client, acme, planted, persona):
    client.force_login(request.getfixturevalue(persona))

    assert client.get(changelist()).status_code == 403
    assert client.get(reverse("admin:governance_secret_add")).status_code == 403
    page = client.get(change_url(planted), follow=True)
    assert b"nlp_api_key" not in page.content
    assert not leaks(page.content.decode())
    client.post(change_url(planted), {"kind": "GENERIC", "value": "hijacked"})
    assert secret_resolve(acme.pk, "nlp_api_key") == PLANTED


def test_an_admin_of_one_workspace_sees_only_its_secrets(client, acme, globex, planted):
    secret_set(workspace=globex, name="globex_token", value="globex value")
    client.force_login(grant(UserFactory(username="gina"), globex, "admin"))

    response = client.get(changelist())

    assert [s.name for s in response.context["cl"].result_list] == ["globex_token"]
    assert b"nlp_api_key" not in response.content
    form = client.get(reverse("admin:governance_secret_add")).context["adminform"].form
    assert list(form.fields["workspace"].queryset) == [globex]
