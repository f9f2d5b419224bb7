"""Bad input through the pages, the JSON API and the agent's memory tools: oversized
and malformed form values, SQL-ish and full-text syntax in searches, and paths that
try to leave the workspace. Each gets a clear refusal, never a 500, and nothing is
stored half-way (rows counted, the file system compared before and after).

Runs on both profiles: NUL characters in particular are stored by SQLite but
refused by PostgreSQL, which is where several of these used to fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.tools import ToolContext, ToolError, get_tool, parse_arguments
from memory import recording
from memory.files import indexing
from memory.models import Event, Fact, MemoryChunk, MemoryFile
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
from sessions_app import chat, cleanup
from sessions_app.models import ApiToken, Session
from tests.support.embeddings import CountingEmbed
from tests.support.files import file_hashes
from tests.support.web import client_for

NUL = "\x00"


@pytest.fixture(autouse=True)
def counting_embed(monkeypatch):
    monkeypatch.setattr(indexing, "embed_texts", CountingEmbed())


@pytest.fixture
def client(alice) -> Client:
    # 500s come back as responses, so a test can assert the status it expects.
    return client_for(alice, raise_request_exception=False)


@pytest.fixture
def workspace(alice) -> Path:
    return workspace_dir(alice.pk, "main")


def rows() -> dict[str, int]:
    models = [Event, Fact, MemoryFile, MemoryChunk, ScheduledTask, Session, ApiToken]
    return {model.__name__: model.objects.count() for model in models}


def page(response) -> str:
    assert response.status_code != 500, response.content.decode()[:500]
    return response.content.decode()


# Forms: oversized and malformed values


def test_it_refuses_a_memory_file_edit_over_the_size_limit(client, workspace, configure):
    configure("memory", file_max_bytes=1024)
    (workspace / "memory").mkdir(parents=True)
    (workspace / "memory/notes.md").write_text("kept")
    opened = client.get("/memory/files/view/", {"path": "memory/notes.md"}).context["sha256"]
    before = file_hashes(workspace)
    response = client.post(
        "/memory/files/view/", {"path": "memory/notes.md", "sha256": opened, "text": "x" * 2000}
    )
    assert response.status_code == 400
    assert "would be 2000 bytes, more than the 1024 allowed" in page(response)
    assert file_hashes(workspace) == before


def test_it_refuses_a_request_body_beyond_djangos_limit(client, workspace, settings):
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "MEMORY.md").write_text("kept")
    before = file_hashes(workspace)
    body = {"path": "MEMORY.md", "sha256": "", "text": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE)}
    assert client.post("/memory/files/view/", body).status_code == 400
    assert file_hashes(workspace) == before


BAD_NAMES = [
    ("../x", "not allowed"),
    ("/etc/passwd", "absolute path"),
    ("memory/../../x", "not allowed"),
    ("..\\..\\x", "not allowed"),
    ("C:\\Windows\\x", "absolute path"),
    ("~/x", "absolute path"),
    ("..%2f..%2fx", "not a memory file"),  # not decoded again: a hidden file name
    (f"a{NUL}b", "NUL"),
    ("a" * 300, "too long"),  # was a 500: OSError "File name too long"
    ("d/" * 300 + "x", "too long"),
    (".hidden", "not a memory file"),
    ("notes.txt/..", "not a memory file"),
    ("memory/../x", "not allowed"),
]


@pytest.mark.parametrize(("name", "message"), BAD_NAMES)
def test_it_refuses_bad_names_for_a_new_file_and_creates_nothing(client, tmp_path, name, message):
    before = file_hashes(tmp_path)
    response = client.post("/memory/files/new/", {"name": name}, follow=True)
    assert response.status_code == 200
    assert message in page(response)
    assert file_hashes(tmp_path) == before and not MemoryFile.objects.exists()


def test_it_refuses_a_fact_too_long_or_with_nul(client, alice):
    existing = Fact.objects.create(owner=alice, category="pref", key="tea", value="green")
    before = rows()
    for fields, message in [
        ({"value": "v" * (Fact.MAX_VALUE + 1)}, f"at most {Fact.MAX_VALUE:,} characters"),
        ({"category": "c" * 101}, "at most 100 characters"),
        ({"key": "k" * 256}, "at most 255 characters"),
        ({"value": f"milk{NUL}"}, "Null characters are not allowed"),
        ({"key": f"k{NUL}"}, "Null characters are not allowed"),
    ]:
        data = {"category": "pref", "key": "coffee", "value": "black", **fields}
        assert message in page(client.post("/memory/facts/", data))
        assert message in page(client.post(f"/memory/facts/{existing.pk}/edit/", data))
    assert rows() == before
    existing.refresh_from_db()
    assert (existing.key, existing.value) == ("tea", "green")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schedule": "0 9 * * 8"}, "is not a valid cron expression"),
        ({"schedule": "s" * 5000}, "at most"),
        ({"name": f"n{NUL}"}, "Null characters are not allowed"),
        ({"prompt": f"p{NUL}"}, "Null characters are not allowed"),
        ({"schedule": f"daily{NUL}"}, "Null characters are not allowed"),
    ],
)
def test_it_refuses_a_task_with_bad_values_and_saves_nothing(client, fields, message):
    data = {"name": "Brief", "schedule": "daily at 9am", "prompt": "Summarise", **fields}
    response = client.post("/tasks/", data)
    assert response.status_code == 200 and message in page(response)
    assert not ScheduledTask.objects.exists()


def test_it_previews_any_schedule_text_without_failing(client):
    for schedule in [NUL, "' OR 1=1 --", "9" * 5000, "every 99999999999999999999 minutes"]:
        assert page(client.get("/tasks/preview/", {"schedule": schedule}))


@pytest.mark.parametrize(("name", "message"), [("t" * 101, "at most 100"), (NUL, "Null")])
def test_it_refuses_a_bad_token_name_and_issues_nothing(client, name, message):
    assert message in page(client.post("/settings/tokens/", {"name": name}))
    assert not ApiToken.objects.exists()


def test_it_ignores_malformed_cleanup_ids_and_refuses_too_many(client, alice):
    session = chat.start_chat(alice)
    values = [NUL, "x" * 10_000, "' OR 1=1 --", "../" + str(session.pk), str(session.pk)]
    for action, answer in [("confirm", "Nothing was selected"), ("delete", "Nothing was deleted")]:
        response = client.post(f"/sessions/cleanup/{action}/", {"session": values})
        assert answer in page(response)
        # Django refuses a form with more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS.
        many = {"session": [str(session.pk)] * (cleanup.MAX_SELECTED + 1)}
        assert client.post(f"/sessions/cleanup/{action}/", many).status_code == 400
    assert Session.objects.filter(pk=session.pk).exists()  # in use: never a candidate


# The JSON API


@pytest.fixture
def api(alice) -> Client:
    return Client(
        raise_request_exception=False,
        headers={"Authorization": f"Bearer {ApiToken.issue(alice, 'script')[1]}"},
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (json.dumps({"text": f"hello{NUL}"}), "cannot contain NUL"),  # was a 500 on PostgreSQL
        ('{"text": "\\ud800"}', "not valid Unicode"),  # was Python's codec error
        ("[" * 100_000, "nested too deeply"),  # was a 500: RecursionError
        ('{"text": ' * 3000 + '"x"' + "}" * 3000, "nested too deeply"),
        (json.dumps({"text": "€" * (chat.MAX_MESSAGE_BYTES // 3 + 1)}), "longer than 64 KB"),
    ],
)
def test_it_refuses_bad_api_messages_and_stores_nothing(alice, api, raw, message):
    session = chat.start_chat(alice)
    before = rows()
    response = api.post(
        f"/api/v1/sessions/{session.pk}/messages", raw, content_type="application/json"
    )
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert rows() == before
    session.refresh_from_db()
    assert session.title == ""


@pytest.mark.parametrize(
    "agent", [f"main{NUL}", "' OR 1=1 --", "../main", "x" * 1000, ["main"], {"name": "main"}]
)
def test_it_refuses_a_bad_agent_name_for_a_new_session(api, agent):
    before = rows()
    response = api.post("/api/v1/sessions/", {"agent": agent}, content_type="application/json")
    assert response.status_code == 400 and "agent" in response.json()["error"]
    assert rows() == before


@pytest.mark.parametrize("token", [f"nt_abc{NUL}_def", f"nt_{NUL}_{NUL}", "nt_' OR 1=1 --_x"])
def test_it_answers_401_to_a_malformed_token(alice, token):
    response = Client(raise_request_exception=False).get(
        "/api/v1/sessions/", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 401  # NUL was a 500 on PostgreSQL


@pytest.mark.parametrize("query", [{"page": NUL}, {"page": "-1"}, {"page": "1e9"}])
def test_it_answers_400_to_bad_paging(api, query):
    assert api.get("/api/v1/sessions/", query).status_code in (200, 400)


# Searches: SQL and full-text syntax are only words

SQLISH = [
    "' OR 1=1 --",
    '"; DROP TABLE events; --',
    "banana' OR '1'='1",
    "NEAR(banana apple)",
    "banana*",
    "*",
    '"unbalanced',
    "AND OR NOT",
    "text:banana",
    "banana -apple",
    "^banana",
    "(",
    "' UNION SELECT secret_hash FROM sessions_app_apitoken --",
    "%_%",
    "\\",
    "banana & | ! <->",
    NUL,
    f"banana{NUL}apple",
    "ß" * 2500,
]


@pytest.fixture
def memories(alice, bob) -> None:
    for owner, text in [(alice, "a banana and an apple"), (bob, "bob's banana secret")]:
        session = chat.start_chat(owner)
        recording.record(owner, str(session.pk), "user_message", {"content": text})
        Fact.objects.create(owner=owner, category="fruit", key="banana", value=text)


@pytest.mark.parametrize("query", SQLISH)
def test_it_treats_sql_and_search_syntax_in_memory_search_as_words(client, memories, query):
    before = rows()
    for url, headers in [("/memory/", {}), ("/memory/", {"HX-Request": "true"})]:
        content = page(client.get(url, {"q": query}, headers=headers))
        assert "bob&#x27;s banana secret" not in content and "bob's banana" not in content
    facts = page(client.get("/memory/facts/", {"q": query}))  # NUL was a 500 on PostgreSQL
    assert "bob&#x27;s banana secret" not in facts
    assert rows() == before


def test_it_still_finds_the_words_around_search_syntax(client, memories):
    content = page(client.get("/memory/", {"q": "banana' OR 1=1 --"}))
    assert "a banana and an apple" in content


@pytest.mark.parametrize("query", SQLISH)
def test_the_search_tool_answers_sql_and_search_syntax(alice, memories, workspace, query):
    context = ToolContext(owner=alice, session_id="s", agent_name="main", workspace=workspace)
    tool = get_tool("search_memory")
    answer = tool.run(context, parse_arguments(tool, json.dumps({"query": query[:2000]})))
    assert "bob's banana secret" not in answer


def test_the_admin_search_treats_sql_as_words(memories):
    admin = User.objects.create_superuser("root", password="x")
    client = client_for(admin, raise_request_exception=False)
    before = rows()

    def found(url: str, query: str) -> int:
        response = client.get(url, {"q": query})
        assert response.status_code == 200, (url, query)
        return response.context["cl"].result_count

    # The search works: alice's and bob's banana, and both sessions by their key.
    key = Session.objects.first().key
    assert found("/admin/memory/event/", "banana") == 2
    assert found("/admin/memory/fact/", "banana") == 2
    assert found("/admin/sessions_app/session/", key) == 1
    for url in ["/admin/memory/event/", "/admin/memory/fact/", "/admin/sessions_app/session/"]:
        for query in SQLISH:
            if NUL in query:  # refused before any view (PostgreSQL cannot take it)
                assert client.get(url, {"q": query}).status_code == 400, (url, query)
                continue
            # Every word of these is looked for literally, and none is in any row:
            # an `OR 1=1`, a `%_%` or a UNION that ran would find rows.
            assert found(url, query) == 0, (url, query)
    assert rows() == before


# Paths: the memory-file tools and pages stay in the workspace

ESCAPING_PATHS = [
    "../x.md",
    "../../../../../../tmp/x.md",
    "/etc/passwd",
    "/tmp/x.md",
    "memory/../../x.md",
    "memory/./../../x.md",
    "memory//../../x.md",
    "..%2fx.md",
    "memory/..%2f..%2fx.md",
    "..\\x.md",
    "memory\\..\\..\\x.md",
    "\\\\server\\share\\x.md",
    "C:\\x.md",
    "~/x.md",
    "file:///etc/passwd",
    f"memory/x.md{NUL}.txt",
    f"memory/{NUL}",
    "memory/" + "a" * 250 + ".md",  # was an OSError: "File name too long"
    "memory/" + "d/" * 300 + "x.md",
    "memory/\ud800.md",  # a lone surrogate, from the model's JSON
    "MEMORY.md/../../x.md",
    " ../x.md",
    ".",
]
TOOLS = {
    "read_memory_file": {},
    "write_memory_file": {"text": "pwned"},
    "append_memory_file": {"text": "pwned"},
}


def run_through_the_runtime(context: ToolContext, name: str, arguments: dict) -> str:
    # As the agent runtime does: the JSON from the model, checked, then run.
    tool = get_tool(name)
    return tool.run(context, parse_arguments(tool, json.dumps(arguments)))


@pytest.mark.parametrize("path", ESCAPING_PATHS)
@pytest.mark.parametrize("tool", TOOLS)
def test_the_memory_tools_refuse_paths_out_of_the_workspace(alice, tmp_path, path, tool):
    workspace = workspace_dir(alice.pk, "main")
    context = ToolContext(owner=alice, session_id="s", agent_name="main", workspace=workspace)
    before = file_hashes(tmp_path)
    with pytest.raises(ToolError) as refused:
        run_through_the_runtime(context, tool, {"path": path, **TOOLS[tool]})
    assert str(refused.value).strip()
    assert file_hashes(tmp_path) == before
    assert not MemoryFile.objects.exists()


@pytest.fixture
def outside(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.md"
    secret.parent.mkdir()
    secret.write_text("secret")
    return secret


@pytest.mark.parametrize(
    ("link", "target", "path"),
    [
        ("MEMORY.md", "file", "MEMORY.md"),
        ("memory", "dir", "memory/secret.md"),
        ("memory", "dir", "memory/new.md"),
        ("memory/sub", "dir", "memory/sub/secret.md"),
        ("memory/link.md", "file", "memory/link.md"),
    ],
)
def test_the_memory_tools_refuse_symlinks_out(alice, tmp_path, outside, link, target, path):
    workspace = workspace_dir(alice.pk, "main")
    (workspace / link).parent.mkdir(parents=True, exist_ok=True)
    (workspace / link).symlink_to(outside if target == "file" else outside.parent)
    context = ToolContext(owner=alice, session_id="s", agent_name="main", workspace=workspace)
    before = file_hashes(tmp_path)
    for tool, extra in TOOLS.items():
        with pytest.raises(ToolError, match="a symbolic link; links in a workspace are not"):
            run_through_the_runtime(context, tool, {"path": path, **extra})
    assert file_hashes(tmp_path) == before
    assert outside.read_text() == "secret"
    listing = run_through_the_runtime(context, "list_memory_files", {})
    assert "secret" not in MemoryChunk.objects.values_list("text", flat=True)
    assert "pwned" not in listing


@pytest.mark.parametrize("path", [p for p in ESCAPING_PATHS if "\ud800" not in p])
def test_the_file_pages_refuse_paths_out_of_the_workspace(client, alice, tmp_path, path):
    before = file_hashes(tmp_path)
    in_a_url = 400 if NUL in path else 404  # a NUL in a query is refused before any view
    assert client.get("/memory/files/view/", {"path": path}).status_code == in_a_url
    save = {"path": path, "sha256": "", "text": "pwned"}
    assert client.post("/memory/files/view/", save).status_code == 404
    assert client.get("/memory/files/delete/", {"path": path}).status_code == in_a_url
    assert client.post("/memory/files/delete/", {"path": path}).status_code == 404
    assert file_hashes(tmp_path) == before and not MemoryFile.objects.exists()
    # A typed name is relative to memory/ ("file:///x" is memory/file:/x.md): nothing
    # may land outside the workspace.
    workspace = workspace_dir(alice.pk, "main")
    assert page(client.post("/memory/files/new/", {"name": path}, follow=True))
    outside = {
        name: sha
        for name, sha in file_hashes(tmp_path).items()
        if not (tmp_path / name).is_relative_to(workspace)
    }
    assert outside == before


@pytest.mark.parametrize("agent", ["../1", "..", f"main{NUL}", "a/b", "x" * 100, "' OR 1=1 --"])
def test_the_file_pages_refuse_bad_agent_names(client, tmp_path, agent):
    before = file_hashes(tmp_path)
    in_a_url = 400 if NUL in agent else 404  # a NUL in a query is refused before any view
    assert client.get("/memory/files/", {"agent": agent}).status_code == in_a_url
    assert client.post("/memory/files/new/", {"agent": agent, "name": "x"}).status_code == 404
    assert file_hashes(tmp_path) == before
