import logging

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_delete, post_migrate, post_save

log = logging.getLogger(__name__)


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent"

    def ready(self) -> None:
        from agent import consolidation_job, prompt
        from agent.mcp import client as mcp_tools
        from agent.models import McpServer
        from memory.models import Fact

        post_migrate.connect(consolidation_job.install_schedule, sender=self)
        # The tools offered from MCP servers hang on the servers and on their owners
        # (a superuser's, active, may offer one to everyone and reach private hosts).
        for signal in (post_save, post_delete):
            for sender in (McpServer, settings.AUTH_USER_MODEL):
                signal.connect(mcp_tools.OFFERED.clear, sender=sender, dispatch_uid="mcp-offered")
            signal.connect(prompt.PROMPT_FACTS.clear, sender=Fact, dispatch_uid="prompt-facts")
        terminal = settings.NEOTASK["terminal"]
        if terminal["enabled"] and terminal["sandbox"] == "none":
            log.warning(
                '[terminal] sandbox = "none": commands run unconfined, as the server\'s user, '
                "and can read the data dir, the database and every user's workspace"
            )
