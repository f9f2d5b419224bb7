from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent"

    def ready(self) -> None:
        from agent import consolidation

        post_migrate.connect(consolidation.install_schedule, sender=self)
