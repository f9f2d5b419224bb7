from django.urls import path

from agent import views

urlpatterns = [
    path("", views.terminal_prefixes, name="terminal-prefixes"),
    path("<int:pk>/activate/", views.activate_prefix, name="terminal-prefix-activate"),
    path("<int:pk>/revoke/", views.revoke_prefix, name="terminal-prefix-revoke"),
]
