from collections.abc import Callable
from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def owner_check(api: str) -> Callable[[str], Any]:
    """core.tokens' check of a personal API token for `api`: its owner, or None."""

    def owner(presented: str) -> Any:
        from sessions_app.models import ApiToken

        token = ApiToken.authenticate(presented, api)
        return token.owner if token is not None else None

    return owner


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        from core import tokens
        from memory import forgetting, provenance
        from sessions_app import cleanup, signals  # noqa: F401
        from sessions_app.chat_deletion import check_chats_idle
        from sessions_app.models import Api, Session

        # Memory tells where a fact came from by its chat's title, which is kept here.
        provenance.name_chats_with(Session.objects.titles)
        # The forget dialog deletes no message of a chat that is answering.
        if check_chats_idle not in forgetting.busy_checks:
            forgetting.busy_checks.append(check_chats_idle)
        # The programs' doors check personal API tokens through core.tokens.
        for api in Api:
            tokens.register(
                api.value, tokens.Scope(owner_check(api), tokens.token_refusal(api.label))
            )
        post_migrate.connect(cleanup.install_schedule, sender=self)
