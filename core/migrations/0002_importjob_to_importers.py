# ImportJob moved to the importers app; its table stays (importers 0001 takes the model over).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("neotask_site", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ImportJob")],
            database_operations=[],
        ),
    ]
