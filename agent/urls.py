from django.urls import path

from agent import views

urlpatterns = [
    path("terminal/", views.terminal_prefixes, name="terminal-prefixes"),
    path("terminal/<int:pk>/activate/", views.activate_prefix, name="terminal-prefix-activate"),
    path("terminal/<int:pk>/revoke/", views.revoke_prefix, name="terminal-prefix-revoke"),
    path("models/", views.model_providers, name="model-providers"),
    path("models/add/", views.model_provider_edit, name="model-provider-add"),
    path("models/test/", views.model_provider_test, name="model-provider-test"),
    path("models/<int:pk>/", views.model_provider_edit, name="model-provider-edit"),
    path("models/<int:pk>/delete/", views.model_provider_delete, name="model-provider-delete"),
    path("mcp/", views.mcp_servers, name="mcp-servers"),
    path("mcp/<int:pk>/test/", views.mcp_server_test, name="mcp-server-test"),
    path("mcp/<int:pk>/delete/", views.mcp_server_delete, name="mcp-server-delete"),
    path("mcp/calls/<int:pk>/revoke/", views.mcp_call_revoke, name="mcp-call-revoke"),
]
