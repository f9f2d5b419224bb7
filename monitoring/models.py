from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """One Prometheus counter series, kept in the database: every web worker and
    job cluster adds to the same row, so a scrape of any one process sees the
    site's total (a counter in process memory would be that process's alone).
    Holds names and numbers only — never user content, so it has no owner."""

    name = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True)  # the series' one label value
    value = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "label"], name="counter_series")]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}} {self.value:g}"
