"""The full-text half's narrow table on PostgreSQL (memory.pgvector.schema.WORDS_SETUP):
a no-op on SQLite.

Like 0014's columns, it stays outside the Django models: triggers on the events
keep it equal to them, so no write path knows of it.
"""

from django.db import migrations

from memory.pgvector import schema


class Migration(migrations.Migration):
    dependencies = [("memory", "0014_pgvector")]

    operations = [schema.on_postgresql(schema.WORDS_SETUP, schema.WORDS_TEARDOWN)]
