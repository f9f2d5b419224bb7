from django.urls import path

from memory import views

urlpatterns = [
    path("", views.memory_search, name="memory-search"),
]
