from django.contrib import admin
from django.urls import include, path

from agent import views as agent_views
from health import views as health
from neotask_site import oidc, views

# 503 for a database that is down, JSON under the APIs (core.unavailable).
handler500 = "core.unavailable.server_error"

admin.site.site_header = "Neotask administration"
admin.site.site_title = "Neotask admin"
admin.site.index_title = "Memory, sessions and tasks"

urlpatterns = [
    path("setup/", views.setup, name="setup"),
    path("setup/model/", agent_views.setup_model, name="setup-model"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", health.prometheus_metrics, name="metrics"),
    path("manifest.webmanifest", views.web_manifest, name="web-manifest"),
    path("accounts/login/", oidc.SignIn.as_view(), name="login"),
    # Single sign-on (neotask_site.oidc); the URL names are mozilla-django-oidc's.
    path("accounts/oidc/start/", oidc.SignInStart.as_view(), name="oidc_authentication_init"),
    path(
        "accounts/oidc/callback/",
        oidc.SignInCallback.as_view(),
        name="oidc_authentication_callback",
    ),
    # Before django.contrib.auth's: logs out at the provider too.
    path("accounts/logout/", oidc.LogOut.as_view(), name="logout"),
    # Both password-change pages count wrong current passwords (core.throttle).
    path("accounts/password_change/", views.PasswordChange.as_view(), name="password_change"),
    path("accounts/", include("django.contrib.auth.urls")),
    path(
        "admin/password_change/",
        admin.site.admin_view(views.admin_password_change),
        name="admin-password-change",
    ),
    path("admin/", admin.site.urls),
    path("history/", views.history, name="history"),
    path("memory/", include("memory.urls")),
    path("tasks/", include("scheduler.urls")),
    path("settings/users/add/", views.add_user, name="user-add"),
    path("settings/", include("agent.urls")),
    path("import/", include("importers.urls")),
    path("", include("importers.data_urls")),
    path("", include("sessions_app.urls")),
]
