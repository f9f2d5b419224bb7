"""The allow-list replaces the deny-list: stored rules it does not allow are
switched off, each with the reason, for its owner to see on /settings/terminal/.

It asks the live agent.rules, not a frozen copy: this only records what the
page shows, and the same check runs again at every use (a rule the table does
not allow covers nothing, switched on or not), so a later table cannot be
undercut by what this migration decided.
"""

from django.db import migrations, models


def switch_off_what_the_allow_list_refuses(apps, schema_editor):
    from agent.rules import rule_problem

    Prefix = apps.get_model("agent", "TerminalAllowedPrefix")
    for rule in Prefix.objects.filter(active=True).iterator():
        problem = rule_problem(rule.prefix)
        if problem:
            rule.active = False
            rule.switched_off_because = (
                f"Switched off by the upgrade to the allow-list: {problem}."
            )[:500]
            rule.save(update_fields=["active", "switched_off_because"])


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0003_prefix_active"),
    ]

    operations = [
        migrations.AddField(
            model_name="terminalallowedprefix",
            name="switched_off_because",
            field=models.CharField(
                blank=True,
                help_text="Why an upgrade switched this rule off; empty if none did.",
                max_length=500,
            ),
        ),
        migrations.RunPython(switch_off_what_the_allow_list_refuses, migrations.RunPython.noop),
    ]
