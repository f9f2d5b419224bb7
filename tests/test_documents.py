from __future__ import annotations

import contextlib
import io
import re
import socket
import zipfile
import zlib
from pathlib import Path

import docx
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from docx.opc.constants import RELATIONSHIP_TYPE
from pypdf import PdfReader, PdfWriter

from agent.runtime import TurnRequest, run_turn
from core.history import Actor
from core.models import Change
from memory import documents, recording
from memory.documents import DocumentError, add_document, convert
from memory.files.paths import MemoryPathError
from memory.models import MemoryChunk, MemoryFile
from memory.search import search_memory
from memory.workspace import workspace_dir
from sessions_app.chat import start_chat
from sessions_app.models import Agent, Session
from tests.support.documents import BUDGET_PDF, make_pdf, nothing_written
from tests.support.scripted_llm import Reply
from tests.support.websocket import ignore

# Fixtures, made here: PDFs written by hand (tests.support.documents) and pypdf, DOCX files
# by python-docx and zipfile.


def encrypted(pdf: bytes) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(build) -> bytes:
    document = docx.Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def trip_docx(document) -> None:
    document.add_heading("Travel plans", level=1)
    document.add_paragraph("Notes for the spring.")
    document.add_heading("Lisbon", level=2)
    document.add_paragraph("The hotel in Lisbon is the Casa Azul, booked for five nights.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "Flight"
    table.rows[0].cells[1].text = "TP1234"


def rewritten_zip(data: bytes, replace: dict[str, bytes]) -> bytes:
    """The same zip with some parts replaced or added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            if item.filename not in replace:
                target.writestr(item, source.read(item.filename))
        for name, content in replace.items():
            target.writestr(name, content, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


@pytest.fixture
def workspace(alice) -> Path:
    return workspace_dir(alice.pk, "main", create=False)


def add(owner, name: str, data: bytes, agent: str = "main") -> str:
    return add_document(owner, agent, name, data, Actor.user(owner))


def file_hits(owner, query: str):
    return [hit for hit in search_memory(owner, query, k=10) if hit.kind == "file"]


# Each format, converted and found with its citation


def test_it_cites_the_page_of_a_pdf_in_memory_search(alice, workspace):
    shown = add(alice, "Q3 report.pdf", BUDGET_PDF)

    assert shown == "memory/docs/Q3 report.md"
    text = (workspace / shown).read_text()
    assert text.startswith("Converted from the PDF file “Q3 report.pdf”, 3 pages.\n")
    assert "## Page 3\n\nBudget\nThe marketing budget for 2027 is 48,000 euros." in text
    # Text that looks like Markdown stays text: it makes no false heading (or page).
    assert "\\# not a heading" in text
    hit = file_hits(alice, "what is the marketing budget for next year?")[0]
    assert (hit.path, hit.heading) == ("memory/docs/Q3 report.md", "Page 3")
    assert "48,000 euros" in hit.text


def test_it_cites_the_heading_of_a_docx(alice, workspace):
    shown = add(alice, "trip.docx", make_docx(trip_docx))

    text = (workspace / shown).read_text()
    assert "# Travel plans\n\nNotes for the spring.\n\n## Lisbon\n" in text
    assert "| Flight | TP1234 |" in text
    hit = file_hits(alice, "which hotel in Lisbon?")[0]
    assert (hit.path, hit.heading) == ("memory/docs/trip.md", "Travel plans > Lisbon")


def test_it_keeps_the_text_and_headings_of_html_and_drops_its_code(alice, workspace):
    page = (
        b"<!doctype html><html><head><title>x</title><style>p{color:red}</style>"
        b"<script>alert('steal')</script></head><body><h1>Garden</h1>"
        b"<h2>Tomatoes</h2><p>Water the <b>tomatoes</b> every\n morning &amp; evening.</p>"
        b"<ul><li>Basil</li><li>Mint</li></ul><img src='http://127.0.0.1:9/x.png'></body></html>"
    )
    shown = add(alice, "garden.html", page)

    text = (workspace / shown).read_text()
    assert "# Garden\n\n## Tomatoes\n\nWater the tomatoes every morning & evening." in text
    assert "- Basil\n- Mint" in text
    assert "alert" not in text and "color" not in text and "<" not in text
    hit = file_hits(alice, "how often do I water the tomatoes?")[0]
    assert (hit.path, hit.heading) == ("memory/docs/garden.md", "Garden > Tomatoes")


def test_it_stores_markdown_as_written_and_text_as_text(alice, workspace):
    add(alice, "wifi.md", b"# Home\r\n\r\n## Wifi\r\nThe wifi password is sunflower42.\r\n")
    add(alice, "plain.txt", b"\xef\xbb\xbf# TODO\nThe car is due for service in May.\n")

    assert (
        (workspace / "memory/docs/wifi.md")
        .read_text()
        .endswith("# Home\n\n## Wifi\nThe wifi password is sunflower42.\n")
    )
    assert "\n\\# TODO\nThe car is due" in (workspace / "memory/docs/plain.md").read_text()
    hit = file_hits(alice, "what is the wifi password?")[0]
    assert (hit.path, hit.heading) == ("memory/docs/wifi.md", "Home > Wifi")


def test_it_records_the_upload_in_history_and_indexes_it(alice, workspace):
    shown = add(alice, "trip.docx", make_docx(trip_docx))

    change = Change.objects.get(owner=alice)
    assert (change.subject_label, change.action, change.actor_kind) == (
        f"main:{shown}",
        Change.Action.CREATED,
        Change.Actor.USER,
    )
    assert change.new_value == {"text": (workspace / shown).read_text()}
    assert MemoryChunk.objects.filter(owner=alice, file__path=shown).count() >= 1


def test_it_cites_the_heading_in_the_answers_recalled_items(alice):
    from memory.embeddings import embed_text
    from memory.recall import recall

    add(alice, "Q3 report.pdf", BUDGET_PDF)
    query = "what is the marketing budget for 2027?"
    items = recall(alice, "main", "s1", query, embed_text(query))
    assert items[0]["source"].startswith("memory/docs/Q3 report.md:")
    assert items[0]["heading"] == "Page 3"


@pytest.mark.django_db(transaction=True)
async def test_it_names_the_file_and_page_to_the_model_in_a_new_chat(alice, llm):
    await sync_to_async(add)(alice, "Q3 report.pdf", BUDGET_PDF)
    llm.script(Reply(text="48,000 euros (Q3 report, page 3)."))

    await run_turn(
        TurnRequest(owner=alice, session_id="new"), "What is the marketing budget for 2027?", ignore
    )
    system = llm.requests[0]["messages"][0]["content"]
    assert "- [memory file: memory/docs/Q3 report.md:" in system
    assert ", Page 3] ## Page 3 Budget The marketing budget for 2027 is 48,000 euros." in system


# Bad files: a clear message, and nothing written


def flate_bomb_pdf() -> bytes:
    """A page whose content stream unpacks from 80 KB to 80 MB."""
    pdf = make_pdf([["x"]])
    stream = zlib.compress(b" " * 80_000_000, 9)
    old = re.search(rb"<< /Length \d+ >>\nstream\n.*?\nendstream", pdf, re.S)
    assert old is not None
    new = f"<< /Length {len(stream)} /Filter /FlateDecode >>\nstream\n".encode()
    # pypdf finds the objects again without the xref (the offsets moved): it is lenient.
    return pdf[: old.start()] + new + stream + b"\nendstream" + pdf[old.end() :]


def zip_bomb_docx() -> bytes:
    # 150 MB of zeros compress to about 150 KB; the directory says what they unpack to.
    return rewritten_zip(make_docx(trip_docx), {"word/media/huge.bin": bytes(150 * 1024 * 1024)})


BAD_FILES = [
    ("secret.pdf", lambda: encrypted(BUDGET_PDF), "encrypted: remove its password"),
    ("broken.pdf", lambda: BUDGET_PDF[:200], "damaged: it cannot be read as a PDF"),
    ("bomb.pdf", flate_bomb_pdf, "a possible decompression bomb"),
    ("bomb.docx", zip_bomb_docx, "refused as a possible zip bomb"),
    ("broken.docx", lambda: make_docx(trip_docx)[:300], "damaged: it cannot be read as a DOCX"),
    ("photo.pdf", lambda: b"\x89PNG\r\n\x1a\n" + bytes(100), "not a PDF: it holds a PNG image"),
    ("report.pdf", lambda: b"Just some text", "not a PDF: it holds text"),
    ("report.docx", lambda: BUDGET_PDF, "not a DOCX: it holds a PDF"),
    ("notes.txt", lambda: b"\x00\x01binary", "not text"),
    ("notes.md", lambda: b"caf\xe9", "not UTF-8 text"),
    ("image.png", lambda: b"\x89PNG\r\n\x1a\n", "not a file Neotask can read"),
    ("Makefile", lambda: b"all:", "not a file Neotask can read"),
    ("empty.txt", lambda: b"", "is empty"),
    ("blank.md", lambda: b"  \n\n", "no text to remember"),
    ("scan.pdf", lambda: make_pdf([[]]), "no text to remember (a scanned PDF"),
    ("../../etc/evil.md", lambda: b"x", "is a path"),
    ("/etc/evil.md", lambda: b"x", "is a path"),
    ("C:\\evil.md", lambda: b"x", "is a path"),
    ("evil\x00.md", lambda: b"x", "NUL"),
    ("a" * 300 + ".md", lambda: b"x", "name is too long"),
    ("....md", lambda: b"x", "no usable name"),
]


@pytest.mark.parametrize(
    ("name", "make", "message"), BAD_FILES, ids=[name[:20] for name, _, _ in BAD_FILES]
)
def test_it_refuses_a_bad_file_and_writes_nothing(alice, workspace, name, make, message):
    with pytest.raises(DocumentError, match=re.escape(message)):
        add(alice, name, make())
    assert nothing_written(alice, workspace)


def test_it_refuses_a_notes_zip_that_is_not_a_docx(alice, workspace):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("notes.txt", "hello")
    with pytest.raises(DocumentError, match="a zip archive without a document"):
        add(alice, "notes.docx", archive.getvalue())
    assert nothing_written(alice, workspace)


def test_it_refuses_too_many_pages_and_too_much_text(alice, workspace, configure, monkeypatch):
    monkeypatch.setattr(documents, "MAX_PAGES", 2)
    with pytest.raises(DocumentError, match="has 3 pages, more than the 2 allowed"):
        add(alice, "long.pdf", BUDGET_PDF)
    configure("memory", file_max_bytes=1024)
    with pytest.raises(DocumentError, match="more than 1,024 bytes of text"):
        add(alice, "long.txt", b"word " * 300)
    monkeypatch.setattr(documents, "MAX_UPLOAD_BYTES", 10)
    with pytest.raises(DocumentError, match="larger than 20 MB"):
        add(alice, "big.txt", b"more than ten bytes")
    assert nothing_written(alice, workspace)


def test_it_refuses_a_document_past_the_workspace_quota(alice, workspace, configure):
    configure("terminal", workspace_mb=1)
    (workspace / "memory").mkdir(parents=True)
    (workspace / "big.bin").write_bytes(bytes(1024 * 1024))
    with pytest.raises(MemoryPathError, match="past its limit"):
        add(alice, "notes.md", b"# Notes\nsomething to remember\n")
    assert nothing_written(alice, workspace)


@pytest.mark.parametrize("failing_step", ["indexing.index_file", "record_file_change"])
def test_it_takes_the_file_back_out_when_the_database_fails(
    alice, workspace, monkeypatch, failing_step
):
    def failing(*args, **kwargs):
        raise DatabaseError("the database went away")

    monkeypatch.setattr(f"memory.documents.{failing_step}", failing)
    with pytest.raises(DatabaseError):
        add(alice, "trip.docx", make_docx(trip_docx))
    assert nothing_written(alice, workspace)


def test_it_never_overwrites_a_memory_file(alice, workspace):
    add(alice, "wifi.md", b"The wifi password is sunflower42.")
    with pytest.raises(DocumentError, match=r"memory/docs/wifi\.md already exists"):
        add(alice, "wifi.txt", b"something else")
    assert "sunflower42" in (workspace / "memory/docs/wifi.md").read_text()
    assert Change.objects.filter(owner=alice).count() == 1


ATTACHED_TEMPLATE = (
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/attachedTemplate"
)


def test_it_never_fetches_what_a_docx_refers_to(alice, workspace):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/template.dotx"

    def linked(document) -> None:
        document.add_paragraph("The linked template is not fetched.")
        document.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, True)
        document.part.relate_to(url, RELATIONSHIP_TYPE.IMAGE, True)
        document.part._settings_part.relate_to(url, ATTACHED_TEMPLATE, True)

    try:
        assert "not fetched" in convert("linked.docx", make_docx(linked)).markdown
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


# The page and the paperclip


def test_it_adds_a_document_from_the_files_page(alice, alice_client, workspace):
    page = alice_client.get("/memory/files/")
    assert b'name="document"' in page.content and b'accept=".pdf,.docx' in page.content

    response = alice_client.post(
        "/memory/files/upload/",
        {"agent": "main", "document": named(BUDGET_PDF, "Q3.pdf")},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == "/memory/files/?agent=main"
    assert b"Added Q3.pdf to memory as memory/docs/Q3.md" in response.content
    assert b"memory/docs/Q3.md" in response.content  # listed
    assert (workspace / "memory/docs/Q3.md").exists()


def named(data: bytes, name: str) -> io.BytesIO:
    upload = io.BytesIO(data)
    upload.name = name
    return upload


def test_it_shows_why_an_upload_was_refused(alice, alice_client, workspace):
    response = alice_client.post(
        "/memory/files/upload/",
        {"agent": "main", "document": named(encrypted(BUDGET_PDF), "secret.pdf")},
        follow=True,
    )
    assert b"Not added to memory: secret.pdf is encrypted" in response.content
    assert nothing_written(alice, workspace)
    missing = alice_client.post("/memory/files/upload/", {"agent": "main"}, follow=True)
    assert b"Choose a file to add to memory." in missing.content
    assert alice_client.get("/memory/files/upload/").status_code == 405


def test_it_takes_a_document_from_the_chat_paperclip_and_returns_to_the_chat(
    alice, alice_client, workspace
):
    agent = Agent.objects.create(owner=alice, name="research")
    session = start_chat(alice, agent)
    back = f"/chat/{session.key}/"
    page = alice_client.get(back)
    assert b'id="attach"' in page.content and b'name="agent" value="research"' in page.content
    assert f'accept="{documents.ACCEPT_ATTRIBUTE}"'.encode() in page.content

    response = alice_client.post(
        "/memory/files/upload/",
        {"agent": "research", "next": back, "document": named(b"The dog is Pixel.", "pets.md")},
    )
    assert (response.status_code, response.url) == (302, back)
    assert (workspace_dir(alice.pk, "research") / "memory/docs/pets.md").exists()
    assert MemoryFile.objects.get(owner=alice).agent == "research"


# The chat's paperclip (neotask_site/static/neotask/attach.js) asks as htmx does: it gets the note
# the chat shows, and no message is left for the next page (the flash that used to
# reload the chat).


def paperclip(client, agent: str, name: str, data: bytes, back: str = "/", session: str = ""):
    """The chat's paperclip, sending what the chat page of `session` gives it (a
    voucher for that chat signed for the chat's owner), or `session` as it is if
    no chat has that id."""
    with contextlib.suppress(ValueError, ValidationError, Session.DoesNotExist):
        session = documents.chat_voucher(Session.objects.get(pk=session).owner, session)
    return client.post(
        "/memory/files/upload/",
        {"agent": agent, "next": back, "session": session, "document": named(data, name)},
        headers={"HX-Request": "true"},
    )


def upload_notes(page: str) -> list[str]:
    return re.findall(r'<li class="note upload">.*?</li>', page, re.S)


def test_the_chat_shows_its_documents_notes_again_after_a_reload(alice, alice_client, workspace):
    session = start_chat(alice)
    back = f"/chat/{session.key}/"
    # The page's paperclip carries a voucher for this chat (signed with the time:
    # read back, not compared with one made a second apart).
    given = re.search(r'name="session" value="([^"]+)"', alice_client.get(back).content.decode())
    assert given and documents.vouched_chat(alice, given[1]) == str(session.pk)
    recording.record(alice, str(session.pk), "user_message", {"content": "before the upload"})
    live = paperclip(
        alice_client, "main", "Plan v2.md", b"# Plan\n\nShip it.", back, str(session.pk)
    )
    recording.record(alice, str(session.pk), "user_message", {"content": "after the upload"})

    page = alice_client.get(back).content.decode()
    # The note the paperclip showed, the same, at its place in the conversation.
    assert upload_notes(page) == [live.content.decode().strip()]
    assert "Added Plan v2.md to memory: 2 passages (" in page  # the front line, the text
    assert (
        page.index("before the upload")
        < page.index("Added Plan v2.md")
        < page.index("after the upload")
    )
    # Another chat of hers lists none of it; nor does a file added from the files page.
    other = start_chat(alice)
    paperclip(alice_client, "main", "elsewhere.md", b"Elsewhere.", f"/chat/{other.key}/")
    assert upload_notes(alice_client.get(f"/chat/{other.key}/").content.decode()) == []
    assert len(upload_notes(alice_client.get(back).content.decode())) == 1

    # Deleted from memory, the document is no longer said to be there.
    alice_client.post("/memory/files/delete/", {"agent": "main", "path": "memory/docs/Plan v2.md"})
    assert not MemoryFile.objects.filter(path="memory/docs/Plan v2.md").exists()
    assert upload_notes(alice_client.get(back).content.decode()) == []


def test_a_document_cannot_be_listed_in_another_users_chat(alice, bob, alice_client, workspace):
    bobs = start_chat(bob)
    # Alice sends what Bob's chat page gives his paperclip: signed for him, not her.
    response = paperclip(alice_client, "main", "mine.md", b"Mine.", "/", str(bobs.pk))

    assert response.status_code == 200  # added to her memory, listed in no chat
    assert MemoryFile.objects.get(owner=alice, path="memory/docs/mine.md").added_in == ""
    assert documents.added_in(bob, str(bobs.pk)) == []
    assert paperclip(alice_client, "main", "odd.md", b"Odd.", "/", "not-a-uuid").status_code == 200


def test_the_paperclip_gets_the_chats_note_of_what_was_added(alice, alice_client, workspace):
    agent = Agent.objects.create(owner=alice, name="research")
    session = start_chat(alice, agent)
    back = f"/chat/{session.key}/"
    page = alice_client.get(back).content.decode()
    # One upload control: the paperclip in the composer; its file input is in a hidden form.
    composer = page[
        page.index('<form id="composer"') : page.index("</form>", page.index('id="composer"'))
    ]
    assert 'id="attach-button"' in composer and 'type="file"' not in composer
    assert re.search(r'<form [^>]*id="attach" hidden>', page)
    assert "Add to memory</button>" not in page and "attach.js" in page

    text = "# Pets\n\nThe dog is Pixel.\n\n## Cats\n\nThe cat is Mochi.\n"
    response = paperclip(alice_client, "research", "pets.md", text.encode(), back)

    assert response.status_code == 200
    chunks = MemoryChunk.objects.filter(owner=alice, agent="research").count()
    assert chunks >= 1
    note = response.content.decode().strip()
    assert note.startswith('<li class="note upload">')
    assert f"Added pets.md to memory: {chunks} passage{'s' if chunks != 1 else ''} (" in note
    assert 'href="/memory/files/view/?agent=research&amp;path=memory%2Fdocs%2Fpets.md"' in note
    assert (workspace_dir(alice.pk, "research") / "memory/docs/pets.md").exists()
    # Nothing waits for the next page: the chat is never redrawn with a flash message.
    assert 'class="flash"' not in alice_client.get(back).content.decode()


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("setup.exe", b"MZ...", "'setup.exe' is not a file Neotask can read"),
        ("secret.pdf", encrypted(BUDGET_PDF), "secret.pdf is encrypted"),
        ("a.md", b"more than ten bytes", "a.md is larger than 20 MB."),
    ],
)
def test_the_paperclip_gets_why_a_file_was_refused(
    alice, alice_client, workspace, monkeypatch, name, data, said
):
    monkeypatch.setattr(documents, "MAX_UPLOAD_BYTES", 10 if name == "a.md" else 20 * 2**20)
    response = paperclip(alice_client, "main", name, data)

    assert response.status_code == 400
    note = response.content.decode().strip()
    assert note.startswith('<li class="note upload error">Not added to memory: ')
    assert said in note.replace("&#x27;", "'")
    assert nothing_written(alice, workspace)
    missing = alice_client.post(
        "/memory/files/upload/", {"agent": "main"}, headers={"HX-Request": "true"}
    )
    assert missing.status_code == 400 and b"Choose a file to add to memory." in missing.content


def test_the_paperclips_note_escapes_the_files_name(alice, alice_client):
    for name in ("<img src=x onerror=alert(1)>.md", "<b>bold.exe"):
        note = paperclip(alice_client, "main", name, b"# Hi\n\nThere.").content.decode()
        assert "<img" not in note and "<b>" not in note
        assert "&lt;img src=x onerror=alert(1)&gt;" in note or "&lt;b&gt;bold" in note


def test_the_paperclip_cannot_reach_another_users_agent(alice, bob, alice_client):
    response = paperclip(alice_client, f"../{bob.pk}/main", "note.md", b"Alice's note.")

    assert response.status_code == 404
    assert not (workspace_dir(bob.pk, "main", create=False) / "memory/docs/note.md").exists()
    assert not MemoryFile.objects.exists()


@pytest.mark.parametrize("in_memory_up_to", [2_621_440, 10])  # Django's default; on disk
def test_it_converts_an_upload_from_the_file_it_was_received_into(
    alice, alice_client, workspace, settings, in_memory_up_to
):
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = in_memory_up_to
    for name, data in [("Q3.pdf", BUDGET_PDF), ("empty.md", b"")]:
        alice_client.post("/memory/files/upload/", {"agent": "main", "document": named(data, name)})
    page = alice_client.get("/memory/files/").content.decode()

    assert "Added Q3.pdf to memory as memory/docs/Q3.md" in page
    assert "Not added to memory: empty.md is empty." in page
    text = (workspace / "memory/docs/Q3.md").read_text()
    assert "The marketing budget for 2027 is 48,000 euros." in text


def test_it_refuses_a_too_large_upload_before_reading_it(alice, alice_client, monkeypatch):
    monkeypatch.setattr(documents, "MAX_UPLOAD_BYTES", 10)
    response = alice_client.post(
        "/memory/files/upload/",
        {"agent": "main", "document": named(b"more than ten bytes", "a.md")},
        follow=True,
    )
    assert b"Not added to memory: a.md is larger than 20 MB." in response.content
    assert not MemoryFile.objects.exists()


def test_it_returns_only_to_a_page_of_this_site(alice, alice_client):
    response = alice_client.post(
        "/memory/files/upload/",
        {"agent": "main", "next": "https://evil.example/", "document": named(b"x", "a.md")},
    )
    assert response.url == "/memory/files/?agent=main"


# Isolation


def test_it_writes_only_into_the_uploaders_own_workspace(alice, bob, alice_client):
    response = alice_client.post(
        "/memory/files/upload/",
        {"agent": "main", "document": named(b"# Secret\nAlice's note.", "note.md")},
    )
    assert response.status_code == 302
    assert not (workspace_dir(bob.pk, "main", create=False) / "memory/docs/note.md").exists()
    assert not MemoryFile.objects.filter(owner=bob).exists()
    assert file_hits(bob, "Alice's note") == []


@pytest.mark.parametrize("agent", ["../2/main", "main/../../x", ".hidden", "a" * 65, "x\x00"])
def test_it_refuses_an_agent_name_that_is_not_one(alice, alice_client, agent):
    response = alice_client.post(
        "/memory/files/upload/", {"agent": agent, "document": named(b"x", "a.md")}
    )
    assert response.status_code == 404
    assert not MemoryFile.objects.exists() and not Change.objects.exists()
