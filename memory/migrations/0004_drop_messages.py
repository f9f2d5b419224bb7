from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0003_messages_to_events"),
    ]

    operations = [
        migrations.DeleteModel(name="Message"),
    ]
