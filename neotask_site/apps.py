from django.apps import AppConfig


class NeotaskSiteConfig(AppConfig):
    """The project package: installed for its `serve` command and its template
    tags. It has no models; its label is not neotask_site, which core keeps for
    the models that were once here."""

    name = "neotask_site"
    label = "neotask_project"
    verbose_name = "Neotask project"
