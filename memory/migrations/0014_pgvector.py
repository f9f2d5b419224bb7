"""The team profile's vectors in PostgreSQL (pgvector): a no-op on SQLite.

The columns stay outside the Django models (memory.pgvector.schema holds the SQL that
reads them): the packed float32 `embedding` stays the one column every write path
sets, and a trigger keeps `embedding_vec` equal to it.
"""

from django.db import migrations

from memory.pgvector import schema


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema.require_extension(schema_editor.connection)
    for statement in schema.SETUP:
        schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in schema.TEARDOWN:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    # The HNSW builds and the backfill are long on a large table; one transaction
    # keeps a failure from leaving half of them.
    dependencies = [("memory", "0013_forgotten_events")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
