from django.apps import AppConfig
from django.db import connections


def close_request_connections(**kwargs: object) -> None:
    """Under ASGI an HTTP request's ORM work runs in a thread of its own that ends
    with the request: its connections close now, not whenever the thread's
    objects are collected (kept connections are for Channels' one shared thread)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:  # a test's transaction, or a caller's
            connection.close()


class NeotaskSiteConfig(AppConfig):
    name = "neotask_site"
    verbose_name = "Neotask"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed
        from django.core.signals import request_finished

        from neotask_site import throttle

        user_login_failed.connect(throttle.record_failure, dispatch_uid="login-throttle")
        request_finished.connect(close_request_connections, dispatch_uid="close-connections")
