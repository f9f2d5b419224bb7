"""PostgreSQL stems words as SQLite's FTS5 does (memory.pgvector.schema.STEMMING_SETUP):
the stored documents are computed again; a no-op on SQLite."""

from django.db import migrations

from memory.pgvector import schema


class Migration(migrations.Migration):
    dependencies = [("memory", "0020_event_words_bm25")]

    operations = [schema.on_postgresql(schema.STEMMING_SETUP, schema.STEMMING_TEARDOWN)]
