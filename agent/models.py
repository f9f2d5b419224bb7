from __future__ import annotations

from django.db import models

from neotask_site.ownership import OwnedModel, OwnedQuerySet


class TerminalAllowedPrefix(OwnedModel):
    """A command prefix its owner chose to "Allow always" for the terminal tool."""

    prefix = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        db_table = "terminal_allowed_prefixes"
        ordering = ["prefix"]
        verbose_name_plural = "terminal allowed prefixes"
        constraints = [
            models.UniqueConstraint(fields=["owner", "prefix"], name="terminal_prefix_unique"),
        ]
        permissions = [("use_terminal", "Can approve terminal commands")]

    def __str__(self) -> str:
        return self.prefix
