from django.apps import AppConfig
from django.db import connections


def close_request_connections(**kwargs: object) -> None:
    """Under ASGI an HTTP request's ORM work runs in a thread of its own that ends
    with the request: its connections close now, not whenever the thread's
    objects are collected (kept connections are for Channels' one shared thread)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:  # a test's transaction, or a caller's
            connection.close()


class CoreConfig(AppConfig):
    name = "core"
    # The label these models had when they lived in neotask_site: their tables
    # (neotask_site_change…), content types, permissions and the other apps'
    # migration dependencies all name it, so keeping it changes no row.
    label = "neotask_site"
    verbose_name = "Neotask"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed
        from django.core.signals import request_finished

        from core import throttle

        user_login_failed.connect(throttle.record_failure, dispatch_uid="login-throttle")
        request_finished.connect(close_request_connections, dispatch_uid="close-connections")
