from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path

from neotask_site import views
from neotask_site.forms import ThrottledAuthenticationForm

admin.site.site_header = "Neotask administration"
admin.site.site_title = "Neotask admin"
admin.site.index_title = "Memory, sessions and tasks"

urlpatterns = [
    path("setup/", views.setup, name="setup"),
    path("healthz", views.healthz, name="healthz"),
    path(
        "accounts/login/",
        LoginView.as_view(authentication_form=ThrottledAuthenticationForm),
        name="login",
    ),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("memory/", include("memory.urls")),
    path("tasks/", include("scheduler.urls")),
    path("settings/terminal/", include("agent.urls")),
    path("import/", include("importers.urls")),
    path("", include("sessions_app.urls")),
]
