"""The full-text half's narrow table on PostgreSQL (memory.pgvector.schema.WORDS_SETUP):
a no-op on SQLite.

Like 0014's columns, it stays outside the Django models: triggers on the events
keep it equal to them, so no write path knows of it.
"""

from django.db import migrations

from memory.pgvector import schema


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.WORDS_SETUP:
        schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.WORDS_TEARDOWN:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0014_pgvector")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
