from typing import Any

from django.urls import re_path

from sessions_app.consumers import ChatConsumer

# Any: channels routes ASGI apps with Django's re_path, whose stubs know only views.
chat_consumer: Any = ChatConsumer.as_asgi()
websocket_urlpatterns: list[Any] = [
    # Any key, however malformed or long: the consumer closes it with 4404 (a
    # path no route matched would end in an exception instead).
    re_path(r"^ws/chat/(?P<session_key>.*)/$", chat_consumer),
]
