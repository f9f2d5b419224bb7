"""BM25's figures on PostgreSQL (memory.pgvector.schema.BM25_SETUP): each memory's
length and each owner's totals beside the full-text table, kept by its trigger; a
no-op on SQLite, whose FTS5 keeps its own."""

from django.db import migrations

from memory.pgvector import schema


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.BM25_SETUP:
        schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.BM25_TEARDOWN:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0019_memoryfile_added_in")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
