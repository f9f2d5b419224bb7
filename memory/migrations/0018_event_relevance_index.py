from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0017_event_imported_from"),
    ]

    # The relevance branch's order (importance, then date): its rows are read in
    # the index's order, only as many as it shows. The old index is its prefix.
    operations = [
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                fields=["owner", "agent", "importance", "created_at"], name="event_relevance"
            ),
        ),
        migrations.RemoveIndex(
            model_name="event",
            name="event_owner_importance",
        ),
    ]
