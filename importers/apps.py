from django.apps import AppConfig


class ImportersConfig(AppConfig):
    name = "importers"
    verbose_name = "Imports"
