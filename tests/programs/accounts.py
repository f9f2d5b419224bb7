"""Users, their logins, chats and tokens, made in the app's database."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management import call_command

from memory.workspace import workspace_dir
from sessions_app.chat import start_chat
from sessions_app.models import ApiToken, ChatInput, Session
from tests.support import records
from tests.support.records import login_session


def add_user(username: str, migrate: bool = False) -> None:
    """A new user. `migrate` first migrates the database, in the same process (on a
    loaded machine each Django start-up costs seconds)."""
    if migrate:
        call_command("migrate", verbosity=0)
    get_user_model().objects.create_user(username)


def logged_in_chat(username: str, migrate: bool = False) -> list[str]:
    """A new user, logged in: their session cookie and the key of a fresh web chat
    of theirs (`migrate` as for add_user)."""
    add_user(username, migrate)
    user = get_user_model().objects.get(username=username)
    return [login_session(user), start_chat(user).key]


def more_chats(username: str, count: int) -> list[str]:
    """The keys of `count` new web chats of the user's."""
    user = get_user_model().objects.get(username=username)
    return [start_chat(user).key for _ in range(count)]


def api_token(username: str, key: str) -> list[str]:
    """A new API token of the user's, and the id of their active session of chat `key`."""
    user = get_user_model().objects.get(username=username)
    session = Session.objects.get(owner=user, key=key, status="active")
    return [ApiToken.issue(user, "test")[1], str(session.pk)]


def allow_terminal(username: str) -> None:
    """The user may run and approve terminal commands."""
    records.allow_terminal(get_user_model().objects.get(username=username))


def memory_file() -> None:
    """A new user with a MEMORY.md in their workspace."""
    user = get_user_model().objects.create_user("u")
    (workspace_dir(user.pk, "main") / "MEMORY.md").write_text("x")


def group_with_permission(group: str, codename: str) -> None:
    """The Django group `group`, granted the permission `codename` (as in the admin)."""
    from django.contrib.auth.models import Group, Permission

    Group.objects.get_or_create(name=group)[0].permissions.add(
        Permission.objects.get(codename=codename)
    )


def account(username: str) -> dict[str, object] | None:
    """What the app knows of `username`'s account; None if there is none."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return None
    return {
        "email": user.email,
        "has_password": user.has_usable_password(),
        "groups": sorted(user.groups.values_list("name", flat=True)),
        "can_use_terminal": user.has_perm("agent.use_terminal"),
    }


def limited_user(username: str, password: str, messages_per_minute: int) -> None:
    """A new user with `password`, in a group whose quota allows
    `messages_per_minute` (and any number of tokens)."""
    from django.contrib.auth.models import Group

    from sessions_app.models import GroupQuota

    user = get_user_model().objects.create_user(username, password=password)
    group = Group.objects.create(name=f"{username} quota")
    GroupQuota.objects.create(group=group, messages_per_minute=messages_per_minute)
    user.groups.add(group)


def user_token(username: str) -> str:
    """A new API token of the user `username`, who is made if new."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    return ApiToken.issue(user, "openai client")[1]


def unfinished_inputs(username: str) -> int:
    """How many of the user's chat inputs wait or run."""
    user = get_user_model().objects.get(username=username)
    return ChatInput.objects.filter(owner=user).exclude(status=ChatInput.Status.DONE).count()
