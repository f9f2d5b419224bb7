from __future__ import annotations

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.management import CommandError
from django.http import Http404

from core.ownership import OwnedModel, OwnedQuerySet, get_owned_or_404
from core.users import find_user
from memory.models import Event
from sessions_app.models import Session
from tests.support.records import OWNED_MODELS, PROJECT_APPS, SITE_MODELS, make_rows


def project_models():
    return [
        m
        for name in PROJECT_APPS
        for m in apps.get_app_config(name).get_models()
        if m not in SITE_MODELS
    ]


# A site row may name the staff member who set it (who may reach what: agent.outbound);
# that is the site's record of its operators, not a user's data.
OPERATOR_FIELDS = {("ModelProvider", "url_set_by")}


def test_it_keeps_user_data_out_of_the_sites_models():
    user = apps.get_model(settings.AUTH_USER_MODEL)
    for model in SITE_MODELS:
        related = {
            f.related_model
            for f in model._meta.get_fields()
            if f.is_relation and (model.__name__, f.name) not in OPERATOR_FIELDS
        }
        assert user not in related and not issubclass(model, OwnedModel), model


def test_it_gives_every_model_with_user_data_an_owner():
    # A new model must be added to make_rows, which every scoping test uses.
    assert set(project_models()) == set(OWNED_MODELS)
    for model in project_models():
        assert issubclass(model, OwnedModel), model
        owner = model._meta.get_field("owner")
        assert owner.related_model is apps.get_model(settings.AUTH_USER_MODEL)
        assert not owner.null, model
        assert isinstance(model._default_manager.all(), OwnedQuerySet), model


def test_it_scopes_every_model_to_its_owner(alice, bob):
    alices = make_rows(alice, "a")
    bobs = make_rows(bob, "b")
    for model in project_models():
        assert list(model.objects.owned_by(alice)) == [alices[model]], model
        assert list(model.objects.owned_by(bob)) == [bobs[model]], model
        assert not model.objects.owned_by(AnonymousUser()).exists()
        assert not model.objects.owned_by(None).exists()


@pytest.mark.parametrize("model_name", ["Event", "Fact", "Session", "ScheduledTask"])
def test_it_raises_404_for_someone_elses_row(alice, bob, model_name):
    alices = {m.__name__: row for m, row in make_rows(alice).items()}
    row = alices[model_name]
    assert get_owned_or_404(type(row), alice, pk=row.pk) == row
    with pytest.raises(Http404):
        get_owned_or_404(type(row), bob, pk=row.pk)


def test_it_shows_user_b_a_404_for_user_as_session(alice, alice_client, bob_client):
    session = make_rows(alice)[Session]
    response = alice_client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 200
    assert b"hello" in response.content
    response = bob_client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 404
    assert b"hello" not in response.content


def test_it_lists_only_the_users_own_sessions(alice, bob, bob_client):
    make_rows(alice, "-secret-of-alice")
    make_rows(bob, "-bobs")
    content = bob_client.get("/sessions/").content.decode()
    assert "Chat -bobs" in content
    assert "secret-of-alice" not in content


def test_it_deletes_a_sessions_events_with_it(alice):
    rows = make_rows(alice)
    other = make_rows(alice, "2")
    rows[Session].delete()
    assert not Event.objects.filter(pk=rows[Event].pk).exists()
    assert Event.objects.filter(pk=other[Event].pk).exists()


def test_it_removes_a_users_data_with_the_user(alice, bob):
    make_rows(alice)
    make_rows(bob)
    User.objects.get(pk=alice.pk).delete()
    for model in project_models():
        assert not model.objects.filter(owner_id=alice.pk).exists()
        assert model.objects.filter(owner=bob).exists()


def test_it_finds_a_user_by_username_or_names_the_missing_one(alice):
    assert find_user("alice") == alice
    with pytest.raises(CommandError, match=r'^There is no user "Alice"\.$'):
        find_user("Alice")  # as typed: usernames are case-sensitive
