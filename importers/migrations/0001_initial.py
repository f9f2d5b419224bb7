# ImportJob, moved here from neotask_site with its table (neotask_site_importjob):
# on a database made before the move the table is there; on a new one
# neotask_site's 0001 made it. Its content type (and so its permissions and
# admin history) follows it.

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def relabel_content_type(apps, schema_editor, old="neotask_site", new="importers"):
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.filter(app_label=old, model="importjob").update(app_label=new)


def unrelabel_content_type(apps, schema_editor):
    relabel_content_type(apps, schema_editor, old="importers", new="neotask_site")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("neotask_site", "0002_importjob_to_importers"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ImportJob",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("aidaemon", "aidaemon database"),
                                    ("openclaw", "OpenClaw folder"),
                                ],
                                max_length=16,
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("queued", "Waiting for a worker"),
                                    ("running", "Importing"),
                                    ("done", "Done"),
                                    ("failed", "Failed"),
                                ],
                                default="queued",
                                max_length=16,
                            ),
                        ),
                        ("filename", models.CharField(max_length=255)),
                        ("agent", models.CharField(default="main", max_length=64)),
                        ("dry_run", models.BooleanField(default=False)),
                        ("progress_done", models.PositiveBigIntegerField(default=0)),
                        ("progress_total", models.PositiveBigIntegerField(blank=True, null=True)),
                        ("report", models.JSONField(blank=True, null=True)),
                        ("error", models.TextField(blank=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["-created_at"],
                        "db_table": "neotask_site_importjob",
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(relabel_content_type, unrelabel_content_type),
    ]
