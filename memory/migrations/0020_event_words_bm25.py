"""BM25's figures on PostgreSQL (memory.pgvector.schema.BM25_SETUP): each memory's
length and each owner's totals beside the full-text table, kept by its trigger; a
no-op on SQLite, whose FTS5 keeps its own."""

from django.db import migrations

from memory.pgvector import schema


class Migration(migrations.Migration):
    dependencies = [("memory", "0019_memoryfile_added_in")]

    operations = [schema.on_postgresql(schema.BM25_SETUP, schema.BM25_TEARDOWN)]
