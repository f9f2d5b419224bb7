from django.apps import AppConfig
from django.db.models.signals import post_migrate


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from memory import fulltext, tasks

        post_migrate.connect(fulltext.install_after_migrate, sender=self)
        post_migrate.connect(tasks.install_schedules, sender=self)
