"""Neotask's Prometheus metrics, served at /metrics (docs/deploy.md#monitoring).

Several daphne workers and job clusters, on one machine or several, each do a
share of the work, and Prometheus scrapes one of them at a time. So nothing is
counted in process memory (prometheus_client's own counters, or
django-prometheus's, would each hold one process's share, and its multiprocess
mode one machine's): counters are rows of `monitoring.Counter`, added to by
each process with one upsert every few seconds (monitoring.counters), and gauges
are read from the database when scraped. Any process answers for the whole site.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from health import checks as health
from memory.models import Event, EventType, MemoryChunk
from memory.tasks import MAX_ATTEMPTS
from monitoring.counters import (
    BUCKET_LABELS,
    FIRST_TOKEN_BUCKET,
    FIRST_TOKEN_SUM,
    JOB_FAILURES,
    SANDBOX_RUNS,
    TURNS,
    flush,
)
from monitoring.models import Counter
from sessions_app.models import ChatInput


class NeotaskCollector(Collector):
    """Every metric read from the database at scrape time."""

    def collect(self) -> Iterator[Metric]:
        flush()  # this process's counts of the last moment, not sent yet
        series: dict[str, dict[str, float]] = defaultdict(dict)
        for name, label, value in Counter.objects.values_list("name", "label", "value"):
            series[name][label] = value
        yield from counters(series)
        yield from gauges()


def counters(series: dict[str, dict[str, float]]) -> Iterator[Metric]:
    for name, label, documentation in [
        (TURNS, "status", "Chat inputs run to their end, by how they ended."),
        (SANDBOX_RUNS, "outcome", "Terminal commands run, by how they ended."),
        (JOB_FAILURES, "job", "Background jobs that failed, by function."),
    ]:
        family = CounterMetricFamily(f"neotask_{name}", documentation, labels=[label])
        for value_label, value in sorted(series[name].items()):
            family.add_metric([value_label], value)
        yield family
    buckets = series[FIRST_TOKEN_BUCKET]
    yield HistogramMetricFamily(
        "neotask_first_token_seconds",
        "Seconds from an input's start to its first streamed token.",
        buckets=[(label, buckets.get(label, 0.0)) for label in BUCKET_LABELS],
        sum_value=series[FIRST_TOKEN_SUM].get("", 0.0),
    )


def gauges() -> Iterator[Metric]:
    queued = ChatInput.objects.filter(status=ChatInput.Status.QUEUED)
    yield GaugeMetricFamily(
        "neotask_queued_inputs", "Chat inputs waiting for their turn.", value=queued.count()
    )
    oldest = queued.order_by("created_at").values_list("created_at", flat=True).first()
    age = (timezone.now() - oldest).total_seconds() if oldest else 0.0
    yield GaugeMetricFamily(
        "neotask_oldest_queued_input_seconds", "How long the oldest queued input waits.", value=age
    )
    # Counted from the partial indexes on rows without a vector.
    events = Event.objects.filter(embedding__isnull=True, event_type__in=EventType.CONTENT).exclude(
        text=""
    )
    backlog = GaugeMetricFamily(
        "neotask_embedding_backlog", "Items waiting for a vector.", labels=["kind"]
    )
    backlog.add_metric(["events"], events.filter(embedding_attempts__lt=MAX_ATTEMPTS).count())
    backlog.add_metric(["file_chunks"], MemoryChunk.objects.filter(embedding__isnull=True).count())
    yield backlog
    yield GaugeMetricFamily(
        "neotask_embedding_given_up",
        f"Events whose embedding failed {MAX_ATTEMPTS} times (not retried).",
        value=events.filter(embedding_attempts__gte=MAX_ATTEMPTS).count(),
    )
    up = GaugeMetricFamily(
        "neotask_check_up", "The /healthz checks: 1 up, 0 down.", labels=["check"]
    )
    for name, state in health.run_checks().items():
        up.add_metric([name], 1.0 if state == health.OK else 0.0)
    yield up


REGISTRY = CollectorRegistry()
REGISTRY.register(NeotaskCollector())


def exposition() -> bytes:
    """The metrics in Prometheus's text format."""
    return generate_latest(REGISTRY)
