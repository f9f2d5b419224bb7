"""The importers by kind, as the commands and the upload job run them."""

from __future__ import annotations

from importers.aidaemon import import_aidaemon
from importers.archive.importing import import_archive
from importers.openclaw import import_openclaw

IMPORTERS = {"aidaemon": import_aidaemon, "openclaw": import_openclaw, "neotask": import_archive}
