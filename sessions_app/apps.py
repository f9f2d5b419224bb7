from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Sessions"

    def ready(self) -> None:
        from sessions_app import cleanup, signals  # noqa: F401

        post_migrate.connect(cleanup.install_schedule, sender=self)
