"""Events that aidaemon and OpenClaw imports wrote before events were marked
(`Event.imported_from`): those importers' sessions are recognisable, and each
imported row holds its source's id (`legacy_message_id`), which messages written
here later in the same chat do not. An OpenClaw session opens with its
`session_start` event naming "openclaw"; the other sessions on the "import"
channel are aidaemon's. Archive imports kept their chats' own channels: the rows
they wrote before this cannot be told from the owner's own."""

from django.db import migrations

BATCH = 500  # session ids per UPDATE


def mark(apps, schema_editor):
    Event = apps.get_model("memory", "Event")
    Session = apps.get_model("sessions_app", "Session")
    imported = Event.objects.filter(legacy_message_id__isnull=False, imported_from="")
    openclaw = set(
        imported.filter(event_type="session_start", data__source="openclaw")
        .values_list("session_id", flat=True)
        .distinct()
    )
    aidaemon = {
        str(pk) for pk in Session.objects.filter(channel="import").values_list("pk", flat=True)
    } - openclaw
    for kind, sessions in (("openclaw", sorted(openclaw)), ("aidaemon", sorted(aidaemon))):
        for start in range(0, len(sessions), BATCH):
            imported.filter(session_id__in=sessions[start : start + BATCH]).update(
                imported_from=kind
            )


class Migration(migrations.Migration):
    dependencies = [
        ("importers", "0004_imported_archive"),
        ("memory", "0017_event_imported_from"),
        ("sessions_app", "0010_quota_reservations"),
    ]

    operations = [migrations.RunPython(mark, migrations.RunPython.noop)]
