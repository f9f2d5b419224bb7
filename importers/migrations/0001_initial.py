# ImportJob, moved here from neotask_site with its table (neotask_site_importjob):
# on a database made before the move the table is there; on a new one
# neotask_site's 0001 made it. Its content type (and so its permissions and
# admin history) follows it.

import copy
from importlib import import_module

from django.conf import settings
from django.db import migrations


def import_job_state():
    """The model as neotask_site's 0001 created it, its table named."""
    site_initial = import_module("core.migrations.0001_initial").Migration
    [create] = copy.deepcopy(site_initial.operations)
    create.options["db_table"] = "neotask_site_importjob"
    return create


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
            state_operations=[import_job_state()], database_operations=[]
        ),
        migrations.RunPython(relabel_content_type, unrelabel_content_type),
    ]
