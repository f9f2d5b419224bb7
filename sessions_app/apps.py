from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        from memory import forgetting, provenance
        from sessions_app import cleanup, signals  # noqa: F401
        from sessions_app.chat_deletion import check_chats_idle
        from sessions_app.models import Session

        # Memory tells where a fact came from by its chat's title, which is kept here.
        provenance.name_chats_with(Session.objects.titles)
        # The forget dialog deletes no message of a chat that is answering.
        if check_chats_idle not in forgetting.busy_checks:
            forgetting.busy_checks.append(check_chats_idle)
        post_migrate.connect(cleanup.install_schedule, sender=self)
