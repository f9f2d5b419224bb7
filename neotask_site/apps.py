from django.apps import AppConfig


class NeotaskSiteConfig(AppConfig):
    name = "neotask_site"
    verbose_name = "Neotask"
