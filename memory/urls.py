from django.urls import path

from memory import views

urlpatterns = [
    path("", views.memory_search, name="memory-search"),
    path("forget/", views.forget, name="forget"),
    path("files/", views.memory_files, name="memory-files"),
    path("files/view/", views.memory_file, name="memory-file"),
    path("files/new/", views.memory_file_new, name="memory-file-new"),
    path("files/upload/", views.memory_document_upload, name="memory-document-upload"),
    path("files/delete/", views.memory_file_delete, name="memory-file-delete"),
    path("facts/", views.fact_list, name="fact-list"),
    path("facts/<int:pk>/", views.fact_row, name="fact-row"),
    path("facts/<int:pk>/edit/", views.fact_edit, name="fact-edit"),
    path("facts/<int:pk>/delete/", views.fact_delete, name="fact-delete"),
    path("macros/", views.macro_list, name="macro-list"),
    path("macros/<int:pk>/disable/", views.macro_disable, {"disabled": True}, name="macro-disable"),
    path("macros/<int:pk>/enable/", views.macro_disable, {"disabled": False}, name="macro-enable"),
    path("macros/<int:pk>/delete/", views.macro_delete, name="macro-delete"),
]
