from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0006_mcp_servers"),
    ]

    operations = [
        migrations.AddField(
            model_name="mcpserver",
            name="for_everyone",
            field=models.BooleanField(
                default=False,
                help_text="Superusers only: its tools are offered to every user's agent, each "
                "call still approved by that user; a user's own server of the same name comes "
                "first.",
                verbose_name="Offer to everyone",
            ),
        ),
    ]
