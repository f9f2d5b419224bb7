"""Neotask's own export archive: everything of one user, in a documented,
versioned layout (docs/data-export.md), written and imported back.

layout.py names the members and the limits; writing.py writes an archive;
reading.py opens and checks one; importing.py recreates its content for a user;
jobs.py runs exports in the background.
"""
