from django.apps import AppConfig


class NeotaskSiteConfig(AppConfig):
    name = "neotask_site"
    verbose_name = "Neotask"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from neotask_site import throttle

        user_login_failed.connect(throttle.record_failure, dispatch_uid="login-throttle")
