"""A restore checks the manifest's row counts before it writes (issue 40): an
archive whose database does not hold the rows its manifest lists is refused with
the tables named, and the target database is left untouched (no table made)."""

from __future__ import annotations

import json
import tarfile
from contextlib import closing

from tests.support.processes import app_env
from tests.test_backup import back_up, open_restored, rebuilt, restore, table_names


def one_more_event(info, data):
    """The manifest says the database holds one more event than it does."""
    if info.name == "manifest.json":
        manifest = json.loads(data)
        manifest["database"]["tables"]["events"] += 1
        data = json.dumps(manifest).encode()
    return [(info, data)]


def test_a_restore_refuses_counts_that_differ_before_it_writes(tmp_path, alice):
    good = tmp_path / "good.tar"
    back_up(good)
    with tarfile.open(good) as archive:
        manifest = archive.extractfile("manifest.json")
        assert manifest is not None
        events = json.load(manifest)["database"]["tables"]["events"]
    bad = rebuilt(good, tmp_path / "bad.tar", one_more_event)
    env = app_env(tmp_path / "restored")

    result = restore(bad, env)

    assert result.returncode == 1, result.stdout
    with closing(open_restored(env)) as target:
        assert table_names(target.cursor()) == []  # the target untouched
    assert "Traceback" not in result.stderr
    assert "nothing restored" in result.stderr
    assert f"events: {events} rows, the manifest says {events + 1}" in result.stderr
