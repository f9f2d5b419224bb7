from django.urls import path

from scheduler import views

urlpatterns = [
    path("", views.task_list, name="task-list"),
    path("preview/", views.schedule_preview, name="task-preview"),
    path("<uuid:pk>/", views.task_row, name="task-row"),
    path("<uuid:pk>/pause/", views.task_pause, name="task-pause"),
    path("<uuid:pk>/resume/", views.task_resume, name="task-resume"),
    path("<uuid:pk>/run/", views.task_run, name="task-run"),
    path("<uuid:pk>/delete/", views.task_delete, name="task-delete"),
    path("<uuid:pk>/edit/", views.task_edit, name="task-edit"),
]
