from django.urls import path

from sessions_app import views

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/<uuid:pk>/", views.session_detail, name="session-detail"),
]
