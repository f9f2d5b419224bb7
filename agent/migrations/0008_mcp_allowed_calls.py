import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0007_mcp_server_for_everyone"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="McpAllowedCall",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "url",
                    models.CharField(
                        help_text="Where the server was when allowed.",
                        max_length=500,
                        verbose_name="URL",
                    ),
                ),
                (
                    "call",
                    models.TextField(
                        help_text="The tool and its arguments, as the approval card showed."
                    ),
                ),
                ("digest", models.CharField(editable=False, max_length=64)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "owner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "server",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="allowed_calls",
                        to="agent.mcpserver",
                    ),
                ),
            ],
            options={
                "db_table": "mcp_allowed_calls",
                "ordering": ["-created_at"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("owner", "server", "digest"), name="mcp_allowed_call_unique"
                    )
                ],
            },
        ),
    ]
