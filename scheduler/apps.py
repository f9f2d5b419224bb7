from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        # Registering the agent's scheduling tools here keeps `agent` free of
        # imports from `scheduler` (dependencies point from scheduler to agent).
        from scheduler import due_tasks, tools  # noqa: F401

        post_migrate.connect(due_tasks.install_schedule, sender=self)
