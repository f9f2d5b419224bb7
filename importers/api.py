"""Exports and imports of a user's data in the JSON API (/api/v1/), with the
behaviour of every endpoint there (core.api): token or session auth,
owner-scoped lookups, JSON errors."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import reverse

from core.api import ApiError, ApiRequest, endpoint
from core.ownership import get_owned_or_404
from importers import jobs, views
from importers.archive import jobs as archive_jobs
from importers.archive.download import archive_response
from importers.forms import ImportForm
from importers.models import ExportJob, ImportJob


def job_id(pk: str) -> uuid.UUID:
    try:
        return uuid.UUID(pk)
    except ValueError:
        raise Http404 from None


def export_dict(job: ExportJob) -> dict[str, Any]:
    ready = job.archive_path is not None
    return {
        "id": str(job.pk),
        "status": job.status,
        "progress": {"done": job.progress_done, "total": job.progress_total},
        "error": job.error or None,
        "counts": job.counts,
        "size": job.size,
        "download": reverse("api-export-download", args=[job.pk]) if ready else None,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def import_dict(job: ImportJob) -> dict[str, Any]:
    return {
        "id": str(job.pk),
        "status": job.status,
        "filename": job.filename,
        "dry_run": job.dry_run,
        "progress": {"done": job.progress_done, "total": job.progress_total},
        "error": job.error or None,
        "report": job.report,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def start_export(request: ApiRequest) -> HttpResponse:
    job = archive_jobs.start(request.user)
    location = reverse("api-export", args=[job.pk])
    return JsonResponse(export_dict(job), status=202, headers={"Location": location})


def read_export(request: ApiRequest, pk: str) -> HttpResponse:
    archive_jobs.expire_stale(request.user)
    return JsonResponse(export_dict(get_owned_or_404(ExportJob, request.user, pk=job_id(pk))))


def download_export(request: ApiRequest, pk: str) -> HttpResponseBase:
    job = get_owned_or_404(ExportJob, request.user, pk=job_id(pk))
    if job.archive_path is None:
        raise ApiError(409, f"The export is {job.get_status_display().lower()}, not ready.")
    return archive_response(request, job)


def start_import(request: ApiRequest) -> HttpResponse:
    """An export archive uploaded as multipart/form-data (field "file"; "dry_run" optional)."""
    if refused := views.oversized_upload(request, views.IMPORT_COMMAND):
        raise ApiError(413, refused)
    if "file" not in request.FILES:
        raise ApiError(400, "Upload the archive as multipart/form-data in the field 'file'.")
    kind = ImportJob.Kind.NEOTASK
    dry_run = request.POST.get("dry_run", "").lower() in ("1", "true", "on", "yes")
    form = ImportForm(
        kind, {f"{kind}-dry_run": "on" if dry_run else ""}, {f"{kind}-file": request.FILES["file"]}
    )
    if not form.is_valid():
        raise ApiError(
            400, " ".join(str(error) for errors in form.errors.values() for error in errors)
        )
    job = form.start(request.user)
    location = reverse("api-import", args=[job.pk])
    return JsonResponse(import_dict(job), status=202, headers={"Location": location})


def read_import(request: ApiRequest, pk: str) -> HttpResponse:
    jobs.expire_stale(request.user)
    return JsonResponse(import_dict(get_owned_or_404(ImportJob, request.user, pk=job_id(pk))))


exports_view = endpoint(POST=start_export)
export_view = endpoint(GET=read_export)
download_view = endpoint(GET=download_export)
imports_view = endpoint(POST=start_import)
import_view = endpoint(GET=read_import)
