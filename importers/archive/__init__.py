"""Neotask's own export archive: everything of one user, in a documented,
versioned layout (docs/data-export.md), written and imported back.

layout.py names the members and the limits; records.py declares each record
(what the export writes, what an import checks); writing.py writes an archive;
reading.py opens and checks one (on importers.manifests, shared with the backup);
importing.py recreates its content for a user, with summaries.py (the summaries'
links) and files.py (the memory files); jobs.py runs exports in the background.
"""
