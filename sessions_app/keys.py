"""Session keys, built and parsed in one place.

agent:<agent>:<channel>:<chat>   a conversation (web chats use channel "web")
cron:<task id>                   the runs of one scheduled task
"""

from __future__ import annotations

from dataclasses import dataclass

from memory.workspace import AGENT_NAME_RULE, DEFAULT_AGENT, is_agent_name

MAX_KEY_LENGTH = 255
SCHEDULED_CHANNEL = "cron"  # the channel of scheduled tasks' runs: their keys are cron:<task id>


class SessionKeyError(ValueError):
    """A session key that does not follow the format."""


def is_part(value: object) -> bool:
    """Every part of a key follows the agent-name rule, the agent's being its name."""
    return is_agent_name(value)


def check_part(value: str, what: str) -> str:
    if not is_part(value):
        raise SessionKeyError(f"{what} {value!r} must be {AGENT_NAME_RULE}")
    return value


@dataclass(frozen=True)
class SessionKey:
    agent: str
    channel: str
    chat: str

    def __post_init__(self) -> None:
        check_part(self.agent, "agent")
        check_part(self.channel, "channel")
        check_part(self.chat, "chat")

    @property
    def is_scheduled(self) -> bool:
        """The key of a scheduled task's runs."""
        return self.channel == SCHEDULED_CHANNEL

    def __str__(self) -> str:
        if self.is_scheduled:
            return f"cron:{self.chat}"
        return f"agent:{self.agent}:{self.channel}:{self.chat}"

    @classmethod
    def for_task(cls, task_id: str, agent: str = DEFAULT_AGENT) -> SessionKey:
        return cls(agent=agent, channel=SCHEDULED_CHANNEL, chat=str(task_id))

    @classmethod
    def parse(cls, key: str, cron_agent: str = DEFAULT_AGENT) -> SessionKey:
        if len(key) > MAX_KEY_LENGTH:
            raise SessionKeyError(f"session key is longer than {MAX_KEY_LENGTH} characters")
        parts = key.split(":")
        if len(parts) == 2 and parts[0] == "cron":
            return cls.for_task(parts[1], agent=cron_agent)
        if len(parts) == 4 and parts[0] == "agent":
            return cls(agent=parts[1], channel=parts[2], chat=parts[3])
        raise SessionKeyError(
            f"session key {key!r} must look like agent:<agent>:<channel>:<chat> or cron:<task id>"
        )
