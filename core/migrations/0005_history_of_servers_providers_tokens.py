from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("neotask_site", "0004_mcp_allowed_calls"),
    ]

    operations = [
        migrations.AlterField(
            model_name="change",
            name="subject_kind",
            field=models.CharField(
                choices=[
                    ("fact", "Fact"),
                    ("memory_file", "Memory file"),
                    ("terminal_rule", "Terminal rule"),
                    ("mcp_call", "MCP call allowed always"),
                    ("task", "Task"),
                    ("mcp_server", "MCP server"),
                    ("model_provider", "Model provider"),
                    ("api_token", "API token"),
                ],
                max_length=16,
            ),
        ),
    ]
