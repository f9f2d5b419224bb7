from typing import Any

from django.urls import re_path

from sessions_app.consumers import ChatConsumer

# Any: channels routes ASGI apps with Django's re_path, whose stubs know only views.
chat_consumer: Any = ChatConsumer.as_asgi()
websocket_urlpatterns: list[Any] = [
    re_path(r"^ws/chat/(?P<session_key>[^/]{1,255})/$", chat_consumer),
]
