"""Websocket URL routes; each app that speaks websockets adds its own."""

from sessions_app.routing import websocket_urlpatterns

__all__ = ["websocket_urlpatterns"]
