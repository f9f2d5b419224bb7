from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0009_api_token_scope_and_expiry"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatinput",
            name="reserved_day",
            field=models.DateField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="chatinput",
            name="reserved_tokens",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="reserved",
            field=models.PositiveBigIntegerField(default=0),
        ),
    ]
