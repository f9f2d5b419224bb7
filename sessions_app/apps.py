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


def token_name(presented: str) -> str | None:
    """The name its owner gave an /mcp token, for the history's actor."""
    from sessions_app.models import Api, ApiToken

    token = ApiToken.authenticate(presented, Api.MCP)
    return token.name if token is not None else None


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        from agent.mcp import server as mcp_server
        from core import tokens
        from memory import forgetting, provenance
        from sessions_app import cleanup, quotas, signals  # noqa: F401
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
        # /mcp (agent.mcp.server, a floor below) counts calls and names tokens as told here.
        mcp_server.door.admit = quotas.admit
        mcp_server.door.token_name = token_name
        post_migrate.connect(cleanup.install_schedule, sender=self)
