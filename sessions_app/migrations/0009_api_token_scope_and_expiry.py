import sessions_app.models
from django.db import migrations, models


class Migration(migrations.Migration):
    """Tokens name the APIs they are good for and may expire; the tokens made before
    are good for every API and never expire, as they were."""

    dependencies = [
        ("sessions_app", "0008_chat_input_client"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="apis",
            field=models.JSONField(
                default=sessions_app.models.every_api,
                help_text="The APIs it is good for (Api values).",
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="Empty: it never expires.", null=True),
        ),
    ]
