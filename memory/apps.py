from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from memory import fulltext, tasks
        from memory.system_checks import pgvector_installed

        checks.register(pgvector_installed)

        post_migrate.connect(fulltext.install_after_migrate, sender=self)
        post_migrate.connect(tasks.install_schedules, sender=self)
