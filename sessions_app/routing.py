from django.urls import re_path

from sessions_app.consumers import ChatConsumer

websocket_urlpatterns = [
    re_path(r"^ws/chat/(?P<session_key>[^/]{1,255})/$", ChatConsumer.as_asgi()),
]
