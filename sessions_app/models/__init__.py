"""sessions_app's models, one module per concept (Django finds them here)."""

from sessions_app.models.api_tokens import Api, ApiToken, every_api, hash_secret
from sessions_app.models.chat_queue import LOST, ChatClaim, ChatInput, ChatInputQuerySet
from sessions_app.models.conversations import Agent, Session, SessionQuerySet
from sessions_app.models.usage_limits import DailyUsage, GroupQuota

__all__ = [
    "LOST",
    "Agent",
    "Api",
    "ApiToken",
    "ChatClaim",
    "ChatInput",
    "ChatInputQuerySet",
    "DailyUsage",
    "GroupQuota",
    "Session",
    "SessionQuerySet",
    "every_api",
    "hash_secret",
]
