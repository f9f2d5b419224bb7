"""The Your data page and its API: exports of everything, imports of an export."""

from django.urls import path

from importers import api, views

urlpatterns = [
    path("data/", views.data_page, name="data"),
    path("data/export/", views.data_export, name="data-export"),
    path("data/import/", views.data_import, name="data-import"),
    path("data/exports/<uuid:pk>/", views.export_job, name="data-export-job"),
    path("data/exports/<uuid:pk>/download", views.export_download, name="data-export-download"),
    path("api/v1/export", api.exports_view, name="api-exports"),
    # str, not uuid: a malformed id gets the API's JSON 404, not the HTML one.
    path("api/v1/export/<str:pk>", api.export_view, name="api-export"),
    path("api/v1/export/<str:pk>/download", api.download_view, name="api-export-download"),
    path("api/v1/import", api.imports_view, name="api-imports"),
    path("api/v1/import/<str:pk>", api.import_view, name="api-import"),
]
