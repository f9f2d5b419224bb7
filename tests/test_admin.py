from __future__ import annotations

from datetime import datetime

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.forms.models import model_to_dict
from django.test import Client, RequestFactory

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from memory.models import Event, Fact
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session
from tests.support.records import OWNED_MODELS, PROJECT_APPS, allow_terminal, make_rows
from tests.support.web import client_for


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", password="root-password")


@pytest.fixture
def root_client(root) -> Client:
    return client_for(root)


def changelist(model) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def test_it_lists_every_table_on_the_admin_index(root_client):
    content = root_client.get("/admin/").content.decode()
    project_models = [m for m in admin.site._registry if m._meta.app_label in PROJECT_APPS]
    assert set(project_models) == set(OWNED_MODELS)
    for model in [*project_models, User]:
        assert changelist(model) in content, model


@pytest.mark.parametrize(
    "label",
    [
        "memory.event",
        "memory.fact",
        "memory.macro",
        "sessions_app.agent",
        "sessions_app.session",
        "scheduler.scheduledtask",
        "agent.terminalallowedprefix",
    ],
)
def test_it_registers_each_model_with_search_filters_and_read_only_times(label, root_client, alice):
    model = next(m for m in admin.site._registry if m._meta.label_lower == label)
    model_admin = admin.site._registry[model]
    assert model_admin.search_fields and model_admin.list_filter and model_admin.list_display
    time_fields = {f.name for f in model._meta.fields if f.name.endswith("_at")}
    editable_times = {
        f
        for f in time_fields
        if f in model_admin.readonly_fields or not model._meta.get_field(f).editable
    }
    assert {"created_at"} & time_fields <= editable_times

    row = make_rows(alice, "x")[model]
    response = root_client.get(changelist(model), {"q": "x"})
    assert response.status_code == 200
    response = root_client.get(f"{changelist(model)}{row.pk}/change/")
    assert response.status_code == 200


def test_it_searches_events_by_text_and_session(root_client, alice):
    rows = make_rows(alice, "needle")
    make_rows(alice, "hay")
    content = root_client.get(changelist(Event), {"q": "needle"}).content.decode()
    assert "hello needle" in content and "hello hay" not in content
    event = next(r for m, r in rows.items() if m is Event)
    content = root_client.get(changelist(Event), {"q": event.session_id}).content.decode()
    assert "hello needle" in content and "hello hay" not in content


def test_it_lets_the_admin_edit_a_fact(root_client, alice):
    fact = Fact.objects.create(owner=alice, category="pref", key="color", value="blue")
    response = root_client.post(
        f"{changelist(Fact)}{fact.pk}/change/",
        {"owner": alice.pk, "category": "pref", "key": "color", "value": "green", "source": "user"},
    )
    assert response.status_code == 302
    fact.refresh_from_db()
    assert fact.value == "green"


def test_it_refuses_the_admin_to_non_staff(alice_client):
    response = alice_client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert alice_client.get(changelist(Event)).status_code == 302


def test_it_shows_staff_only_their_own_rows(alice, bob):
    make_rows(alice, "-alice-row")
    make_rows(bob, "-bob-row")
    alice.is_staff = True
    alice.save()
    alice.user_permissions.set(Permission.objects.filter(codename__in=["view_fact"]))
    client = client_for(alice)
    content = client.get(changelist(Fact)).content.decode()
    assert "color-alice-row" in content and "color-bob-row" not in content


# Trust and foreign keys: what model permissions alone do not grant ---------------


def staff(user: User, *codenames: str) -> Client:
    user.is_staff = True
    user.save()
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return client_for(user)


def change_form(model_admin, request_user: User, obj, **changes):
    """The admin's own form for `obj`, bound to its current values plus `changes`."""
    request = RequestFactory().post("/")
    request.user = request_user
    form_class = model_admin.get_form(request, obj, change=True)
    values = {**model_to_dict(obj, fields=form_class.base_fields), **changes}
    data: dict[str, object] = {}
    for name, value in values.items():
        if isinstance(value, datetime):  # the admin's split date and time inputs
            data[f"{name}_0"], data[f"{name}_1"] = value.date(), value.time()
        elif value is not None:
            data[name] = value
    return form_class(data=data, instance=obj)


def test_it_lets_only_staff_with_the_terminal_permission_trust_a_task(alice):
    task = make_rows(alice, "t")[ScheduledTask]
    client = staff(alice, "view_scheduledtask", "change_scheduledtask")
    page = client.get(f"{changelist(ScheduledTask)}{task.pk}/change/").content.decode()
    assert 'name="is_trusted"' not in page  # shown read-only
    model_admin = admin.site._registry[ScheduledTask]
    assert "is_trusted" not in change_form(model_admin, alice, task).fields
    allow_terminal(alice)
    alice = User.objects.get(pk=alice.pk)
    form = change_form(model_admin, alice, task, is_trusted=True)
    assert form.is_valid(), form.errors
    assert form.save().is_trusted


def test_it_keeps_a_trusted_tasks_prompt_from_staff_without_the_permission(alice):
    task = make_rows(alice, "t")[ScheduledTask]
    task.is_trusted = True
    task.save()
    staff(alice, "view_scheduledtask", "change_scheduledtask")
    form = change_form(admin.site._registry[ScheduledTask], alice, task)
    assert not {"is_trusted", "prompt", "agent"} & set(form.fields)


def test_it_lets_only_staff_with_the_terminal_permission_decide_or_add_prefixes(alice):
    rows = make_rows(alice, "t")
    request = rows[ApprovalRequest]
    codenames = [
        *("view_approvalrequest", "change_approvalrequest"),
        *("view_terminalallowedprefix", "add_terminalallowedprefix"),
        "change_terminalallowedprefix",
    ]
    client = staff(alice, *codenames)
    assert client.get(f"{changelist(TerminalAllowedPrefix)}add/").status_code == 403
    prefix = rows[TerminalAllowedPrefix]
    prefix_page = f"{changelist(TerminalAllowedPrefix)}{prefix.pk}/change/"
    assert 'name="prefix"' not in client.get(prefix_page).content.decode()
    client.post(prefix_page, {"owner": alice.pk, "prefix": "python3", "active": ""})
    prefix.refresh_from_db()
    assert (prefix.prefix, prefix.active) == ("lst", True)
    form = change_form(admin.site._registry[ApprovalRequest], alice, request)
    assert not {"status", "decision"} & set(form.fields)

    allow_terminal(alice)
    alice = User.objects.get(pk=alice.pk)
    assert client.get(f"{changelist(TerminalAllowedPrefix)}add/").status_code == 200
    form = change_form(
        admin.site._registry[ApprovalRequest], alice, request, status="approved", decision="once"
    )
    assert form.is_valid(), form.errors


def test_it_refuses_another_owners_row_as_a_foreign_key(alice, bob, root):
    alices, bobs = make_rows(alice, "a"), make_rows(bob, "b")
    task_admin = admin.site._registry[ScheduledTask]
    session_admin = admin.site._registry[Session]
    # A superuser curating alice's rows: bob's agent or session is an error, not a link.
    form = change_form(task_admin, root, alices[ScheduledTask], agent=bobs[Agent].pk)
    assert not form.is_valid()
    assert "someone else's" in " ".join(form.errors["agent"])
    form = change_form(session_admin, root, alices[Session], continues_from=bobs[Session].pk)
    assert "someone else's" in " ".join(form.errors["continues_from"])
    # Staff filing their own rows are offered only their own, and a forged id is refused.
    staff(alice, "view_scheduledtask", "change_scheduledtask", "change_session", "view_session")
    alice = User.objects.get(pk=alice.pk)
    form = change_form(task_admin, alice, alices[ScheduledTask], agent=bobs[Agent].pk)
    assert list(form.fields["agent"].queryset) == [alices[Agent]]
    assert "Select a valid choice" in " ".join(form.errors["agent"])
    form = change_form(session_admin, alice, alices[Session], agent=bobs[Agent].pk)
    assert "Select a valid choice" in " ".join(form.errors["agent"])
    assert change_form(task_admin, root, alices[ScheduledTask]).is_valid()
