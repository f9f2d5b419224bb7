"""Provenance: a summary links the events it condensed; a fact links where its
value came from. The backfill links what the stored rows still tell: a summary's
event range (first_event_id..last_event_id, the turns consolidation claims), a
fact whose value a summary proposed, and a fact whose value an agent's
remember_fact call (its tool_call event) wrote. The rest stays unknown ("")."""

import json

import django.db.models.deletion
from django.db import migrations, models


TURNS = ("user_message", "assistant_response")


def link_summaries(apps, schema_editor):
    Event = apps.get_model("memory", "Event")
    Condensed = Event.condensed.through
    for summary in Event.objects.filter(event_type="summary").iterator():
        first, last = summary.data.get("first_event_id"), summary.data.get("last_event_id")
        if not isinstance(first, int) or not isinstance(last, int):
            continue
        sources = (
            Event.objects.filter(
                owner_id=summary.owner_id,
                session_id=summary.session_id,
                event_type__in=TURNS,
                id__gte=first,
                id__lte=last,
                consolidated_at__isnull=False,
            )
            .exclude(text="")
            .values_list("id", flat=True)
        )
        Condensed.objects.bulk_create(
            [Condensed(from_event_id=summary.pk, to_event_id=pk) for pk in sources],
            ignore_conflicts=True,
        )


def arguments_of(event):
    try:
        arguments = json.loads(event.data.get("arguments") or "{}")
    except (TypeError, ValueError):
        return None
    return arguments if isinstance(arguments, dict) else None


def last_remember_call(Event, fact):
    """The newest remember_fact call of the fact's category/key, if it wrote this value."""
    calls = Event.objects.filter(
        owner_id=fact.owner_id, event_type="tool_call", tool_name="remember_fact"
    ).order_by("-id")
    for call in calls.iterator():
        arguments = arguments_of(call)
        if arguments is None:
            continue
        said = [str(arguments.get(name, "")).strip() for name in ("category", "key", "value")]
        if said[0].lower() == fact.category and said[1].lower() == fact.key:
            return call if said[2] == fact.value else None
    return None


def proposing_summary(Event, fact):
    """The newest summary that proposed this very fact."""
    summaries = Event.objects.filter(owner_id=fact.owner_id, event_type="summary").order_by("-id")
    for summary in summaries.iterator():
        for item in summary.data.get("facts") or []:
            if isinstance(item, dict) and (
                item.get("category"),
                item.get("key"),
                item.get("value"),
            ) == (fact.category, fact.key, fact.value):
                return summary
    return None


def link_facts(apps, schema_editor):
    Event = apps.get_model("memory", "Event")
    Fact = apps.get_model("memory", "Fact")
    for fact in Fact.objects.filter(origin="").iterator():
        if call := last_remember_call(Event, fact):
            fact.origin, fact.origin_event = "turn", call
        elif summary := proposing_summary(Event, fact):
            fact.origin, fact.origin_event = "consolidation", summary
        else:
            continue
        fact.origin_session_id = fact.origin_event.session_id
        fact.save(update_fields=["origin", "origin_event", "origin_session_id"])


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0011_event_search_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="condensed",
            field=models.ManyToManyField(blank=True, related_name="summaries", to="memory.event"),
        ),
        migrations.AddField(
            model_name="fact",
            name="origin",
            field=models.CharField(
                blank=True,
                choices=[
                    ("turn", "a turn of the agent's"),
                    ("message", "your message"),
                    ("import", "an import"),
                    ("consolidation", "a summary of a conversation"),
                    ("page", "the facts page"),
                    ("admin", "the admin"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="fact",
            name="origin_event",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="facts_derived",
                to="memory.event",
            ),
        ),
        migrations.AddField(
            model_name="fact",
            name="origin_label",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="fact",
            name="origin_session_id",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.RunPython(link_summaries, migrations.RunPython.noop),
        migrations.RunPython(link_facts, migrations.RunPython.noop),
    ]
