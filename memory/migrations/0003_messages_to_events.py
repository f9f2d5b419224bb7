"""Move every legacy `messages` row into `events`.

Idempotent: a row is skipped when an event with the same session, event type
and legacy message id exists (also enforced by a unique constraint). Legacy
rows have no owner; they go to the first superuser, or to an inactive
`legacy` account created for the purpose, which an admin can reassign.
"""

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import migrations

# Shared with the aidaemon importer, which must de-duplicate the same way.
from memory.legacy import event_for, event_type_for

BATCH = 500


def legacy_owner(apps):
    User = apps.get_model(settings.AUTH_USER_MODEL)
    owner = User.objects.filter(is_superuser=True).order_by("pk").first()
    if owner is None:
        owner, _ = User.objects.get_or_create(
            username="legacy",
            defaults={"is_active": False, "password": make_password(None)},
        )
    return owner


def messages_to_events(apps, schema_editor):
    Message = apps.get_model("memory", "Message")
    Event = apps.get_model("memory", "Event")
    if not Message.objects.exists():
        return
    owner = legacy_owner(apps)
    done = set(
        Event.objects.filter(legacy_message_id__isnull=False).values_list(
            "session_id", "event_type", "legacy_message_id"
        )
    )
    batch = []
    for message in Message.objects.order_by("created_at", "id").iterator(chunk_size=BATCH):
        if (message.session_id, event_type_for(message.role), message.id) in done:
            continue
        batch.append(event_for(message, owner, Event))
        if len(batch) >= BATCH:
            Event.objects.bulk_create(batch)
            batch = []
    Event.objects.bulk_create(batch)


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("memory", "0002_events_facts_macros"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(messages_to_events, migrations.RunPython.noop, elidable=False),
    ]
