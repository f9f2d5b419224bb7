"""The team profile's vectors in PostgreSQL (pgvector): a no-op on SQLite.

The columns stay outside the Django models (memory.pgvector holds the SQL that
reads them): the packed float32 `embedding` stays the one column every write path
sets, and a trigger keeps `embedding_vec` equal to it.
"""

from django.db import migrations

from memory import pgvector


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    pgvector.require_extension(schema_editor.connection)
    for statement in pgvector.SETUP:
        schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in pgvector.TEARDOWN:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    # The HNSW builds and the backfill are long on a large table; one transaction
    # keeps a failure from leaving half of them.
    dependencies = [("memory", "0013_forgotten_events")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
