"""Sending a finished export archive to its owner, from the page and the API alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, StreamingHttpResponse

from importers.models import ExportJob

CHUNK = 1024 * 1024


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def open_binary(path: Path) -> BinaryIO:
    return path.open("rb")


async def afile_chunks(path: Path) -> AsyncIterator[bytes]:
    handle = await sync_to_async(open_binary)(path)
    try:
        while chunk := await sync_to_async(handle.read)(CHUNK):
            yield chunk
    finally:
        handle.close()


def archive_response(request: HttpRequest, job: ExportJob) -> StreamingHttpResponse:
    """The job's archive as a download; 404 until it is ready (or once it is gone)."""
    path = job.archive_path
    if path is None or not path.is_file():
        raise Http404("The export is not ready.")
    # Daphne streams only an async iterator; a sync one would be read whole first.
    chunks = afile_chunks(path) if isinstance(request, ASGIRequest) else file_chunks(path)
    response = StreamingHttpResponse(chunks, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{job.filename}"'
    response["Content-Length"] = str(path.stat().st_size)
    return response
