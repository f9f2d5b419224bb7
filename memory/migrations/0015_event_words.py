"""The full-text half's narrow table on PostgreSQL (memory.pgvector.WORDS_SETUP):
a no-op on SQLite.

Like 0014's columns, it stays outside the Django models: triggers on the events
keep it equal to them, so no write path knows of it.
"""

from django.db import migrations

from memory import pgvector


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in pgvector.WORDS_SETUP:
        schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in pgvector.WORDS_TEARDOWN:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0014_pgvector")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
