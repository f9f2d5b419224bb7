"""A restore checks the manifest's row counts before it writes (issue 40): an
archive whose database does not hold the rows its manifest lists is refused with
the tables named, and the target database is left untouched (no table made)."""

from __future__ import annotations

import json
import tarfile
from contextlib import closing

import pytest
from django.db import connection

from importers.backup.snapshot import dump_counts, pg_arguments, pg_program, run_pg, table_counts
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


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the team profile's database")
@pytest.mark.django_db(transaction=True)
def test_the_counts_before_writing_sum_a_partitioned_tables_partitions(tmp_path):
    """docs/deploy.md partitions events by owner: the dump holds the partitions' rows,
    the manifest counts them under the table too (count(*)); both must agree."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE split (owner int, t text) PARTITION BY HASH (owner);"
            "CREATE TABLE split_p0 PARTITION OF split FOR VALUES WITH (MODULUS 2, REMAINDER 0);"
            "CREATE TABLE split_p1 PARTITION OF split FOR VALUES WITH (MODULUS 2, REMAINDER 1);"
            "INSERT INTO split SELECT g, E'two\\nlines' FROM generate_series(1, 11) g;"
        )
    try:
        with connection.cursor() as cursor:
            live = table_counts(cursor, "postgresql")
        dump = tmp_path / "db.dump"
        arguments, dbname = pg_arguments(connection.settings_dict)
        command = [pg_program("pg_dump"), "--format=custom", f"--file={dump}", *arguments, dbname]
        run_pg(command, connection.settings_dict, "pg_dump")

        counted = dump_counts(dump)

        assert counted["split"] == live["split"] == 11
        assert counted["split_p0"] + counted["split_p1"] == 11
        assert {name: counted.get(name, 0) for name in live} == live
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE split")
