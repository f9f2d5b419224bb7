from django.apps import AppConfig
from django.db.models.signals import post_delete


class ImportersConfig(AppConfig):
    name = "importers"
    verbose_name = "Imports"

    def ready(self) -> None:
        from importers.archive.jobs import drop_exports, remove_archive
        from importers.models import ExportJob
        from memory.forgetting import forgotten

        # However the row goes (the admin, its owner's account deleted, pruning),
        # its archive goes with it.
        post_delete.connect(remove_archive, sender=ExportJob)
        # A deletion leaves no copy in an earlier export.
        forgotten.connect(drop_exports, dispatch_uid="forgotten-exports")
