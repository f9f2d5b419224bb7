from django.apps import AppConfig
from django.db.models.signals import post_delete


class ImportersConfig(AppConfig):
    name = "importers"
    verbose_name = "Imports"

    def ready(self) -> None:
        from importers.archive.jobs import remove_archive
        from importers.models import ExportJob

        # However the row goes (the admin, its owner's account deleted, pruning),
        # its archive goes with it.
        post_delete.connect(remove_archive, sender=ExportJob)
