from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0007_quotas"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatinput",
            name="client",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="chatinput",
            name="kind",
            field=models.CharField(
                choices=[
                    ("message", "Message"),
                    ("reset", "Reset"),
                    ("compact", "Compact"),
                    ("retry", "Retry"),
                    ("tool_results", "Tool results"),
                ],
                default="message",
                max_length=16,
            ),
        ),
    ]
