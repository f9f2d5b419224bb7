from django.urls import path

from core import history_api
from memory import api as memory_api
from sessions_app import api, openai_views, views

urlpatterns = [
    path("", views.chat_home, name="home"),
    path("chat/new/", views.new_chat, name="chat-new"),
    path("chat/sidebar/", views.sidebar, name="chat-sidebar"),
    path("chat/approval/", views.approval_answer, name="chat-approval"),
    path("chat/<str:key>/", views.chat_page, name="chat"),
    path("chat/<str:key>/events/", views.chat_events, name="chat-events"),
    path("chat/<str:key>/delete/", views.chat_delete, name="chat-delete"),
    path("chat/<str:key>/rename/", views.chat_rename, name="chat-rename"),
    path("chat/<str:key>/model/", views.chat_model, name="chat-model"),
    path("sessions/", views.session_list, name="session-list"),
    path("sessions/cleanup/", views.cleanup_page, name="session-cleanup"),
    path("sessions/cleanup/confirm/", views.cleanup_confirm, name="session-cleanup-confirm"),
    path("sessions/cleanup/delete/", views.cleanup_delete, name="session-cleanup-delete"),
    path(
        "sessions/<uuid:pk>/transcript.jsonl",
        views.session_transcript,
        name="session-transcript",
    ),
    path("agents/", views.agent_list, name="agent-list"),
    path("agents/<int:pk>/", views.agent_edit, name="agent-edit"),
    path("agents/<int:pk>/rename/", views.agent_rename, name="agent-rename"),
    path("settings/tokens/", views.api_tokens, name="api-tokens"),
    path("settings/tokens/<int:pk>/revoke/", views.revoke_api_token, name="api-token-revoke"),
    path("api/v1/sessions/", api.sessions_view, name="api-sessions"),
    # str, not uuid: a malformed id gets the API's JSON 404, not the HTML one.
    path("api/v1/sessions/<str:pk>/", api.session_view, name="api-session"),
    path("api/v1/sessions/<str:pk>/transcript.jsonl", api.transcript_view, name="api-transcript"),
    path("api/v1/sessions/<str:pk>/messages", api.messages_view, name="api-messages"),
    path("api/v1/chats/<str:key>/", api.chat_view, name="api-chat"),
    path("api/v1/events/<str:pk>/", api.event_view, name="api-event"),
    path("api/v1/events/<str:pk>/turn", api.turn_view, name="api-event-turn"),
    path("api/v1/facts/", memory_api.facts_view, name="api-facts"),
    path("api/v1/facts/<str:pk>/", memory_api.fact_view, name="api-fact"),
    path("api/v1/history/", history_api.history_view, name="api-history"),
    path("api/v1/memory-files/", memory_api.memory_file_view, name="api-memory-file"),
    path("v1/models", openai_views.models, name="openai-models"),
    path("v1/chat/completions", openai_views.chat_completions, name="openai-chat-completions"),
    path("v1/<path:rest>", openai_views.unknown, name="openai-unknown"),
    # str, not uuid: memory search links to any session id an event names.
    path("sessions/<str:pk>/", views.session_detail, name="session-detail"),
    path("events/<int:pk>/", views.event_source, name="event-source"),
    path("events/<int:pk>/pin/", views.event_pin, name="event-pin"),
    path("events/<int:pk>/undo/", views.event_undo, name="event-undo"),
    path("events/<int:pk>/delete/", views.event_delete, name="event-delete"),
]
