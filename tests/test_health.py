from __future__ import annotations

from django.db import connection
from django.test import Client


def test_it_reports_a_healthy_database_without_login(db):
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"db": "ok"}


def test_it_answers_503_when_the_database_does_not(db, tmp_path):
    # Point the connection at a file that cannot be opened: a real failure.
    connection.close()
    saved = connection.settings_dict["NAME"]
    connection.settings_dict["NAME"] = str(tmp_path / "missing-dir" / "db.sqlite3")
    try:
        response = Client().get("/healthz")
    finally:
        connection.close()
        connection.settings_dict["NAME"] = saved
    assert response.status_code == 503
    assert response.json() == {"db": "unavailable"}
