"""PostgreSQL stems words as SQLite's FTS5 does (memory.pgvector.schema.STEMMING_SETUP):
the stored documents are computed again; a no-op on SQLite."""

from django.db import migrations

from memory.pgvector import schema


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.STEMMING_SETUP:
        schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.STEMMING_TEARDOWN:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0020_event_words_bm25")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
