from django.urls import path

from importers import views

urlpatterns = [
    path("", views.import_page, name="import"),
    path("<uuid:pk>/", views.import_job, name="import-job"),
]
