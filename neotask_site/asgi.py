"""ASGI entry point: Django for HTTP (and the MCP server at /mcp), Channels for websockets."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neotask_site.settings")
# Django must be set up before anything imports models (the consumers do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from agent.mcp import server as mcp_server  # noqa: E402
from core.unavailable import ClosedWhenDown  # noqa: E402
from core.websocket_origin import SameOriginValidator  # noqa: E402
from monitoring.logs import redact_daphne_access_log  # noqa: E402
from neotask_site.request_bodies import body_in_slices, bound_daphne_bodies  # noqa: E402
from neotask_site.routing import websocket_urlpatterns  # noqa: E402

bound_daphne_bodies()  # request bodies refused as they pass their bound, not after
redact_daphne_access_log()  # no token, code or key in its lines

application = ProtocolTypeRouter(
    {
        "http": body_in_slices(mcp_server.wrap(django_asgi_app)),
        "websocket": ClosedWhenDown(
            SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
