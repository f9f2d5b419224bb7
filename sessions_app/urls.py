from django.urls import path

from sessions_app import views

urlpatterns = [
    path("", views.chat_home, name="home"),
    path("chat/new/", views.new_chat, name="chat-new"),
    path("chat/sidebar/", views.sidebar, name="chat-sidebar"),
    path("chat/<str:key>/", views.chat_page, name="chat"),
    path("chat/<str:key>/events/", views.chat_events, name="chat-events"),
    path("sessions/", views.session_list, name="session-list"),
    # str, not uuid: memory search links to any session id an event names.
    path("sessions/<str:pk>/", views.session_detail, name="session-detail"),
    path("events/<int:pk>/pin/", views.event_pin, name="event-pin"),
]
