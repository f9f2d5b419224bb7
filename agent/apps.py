import logging

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate

log = logging.getLogger(__name__)


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent"

    def ready(self) -> None:
        from agent import consolidation

        post_migrate.connect(consolidation.install_schedule, sender=self)
        terminal = settings.NEOTASK["terminal"]
        if terminal["enabled"] and terminal["sandbox"] == "none":
            log.warning(
                '[terminal] sandbox = "none": commands run unconfined, as the server\'s user, '
                "and can read the data dir, the database and every user's workspace"
            )
