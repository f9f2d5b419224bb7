"""The import page (upload a file, then watch its job) and the Your data page
(export everything, download it, import an export back)."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.htmx import HtmxHttpRequest, render_page
from core.ownership import get_owned_or_404
from importers import jobs, uploads
from importers.archive import jobs as archive_jobs
from importers.archive.download import archive_response
from importers.forms import ImportForm
from importers.models import ExportJob, ImportJob

RECENT_JOBS = 10
# Room for the form fields and multipart boundaries around the file.
FORM_OVERHEAD = 64 * 1024
IMPORT_COMMAND = "python manage.py import_user"


def oversized_upload(request: HttpRequest, commands: str) -> str:
    """Why the request's upload is refused before its body is read (nothing of it
    is stored); "" when it is not too large. `commands`: the shell's way instead."""
    try:
        size = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        size = 0
    if size <= uploads.MAX_UPLOAD_BYTES + FORM_OVERHEAD:
        return ""
    return (
        f"The upload is {uploads.megabytes(size)}; uploads are limited to "
        f"{uploads.megabytes(uploads.MAX_UPLOAD_BYTES)}. Import a bigger file from the "
        f"shell ({commands})."
    )


def import_page(request: HtmxHttpRequest) -> HttpResponse:
    forms = {kind: ImportForm(kind) for kind in ImportJob.Kind.values}
    status, refused = 200, ""
    if request.method == "POST":
        if refused := oversized_upload(
            request, "python manage.py import_aidaemon / import_openclaw"
        ):
            status = 413
        elif (kind := request.POST.get("kind")) in ImportJob.Kind.values:
            form = ImportForm(kind, request.POST, request.FILES)
            if form.is_valid():
                job = form.start(request.user)
                return redirect("import-job", pk=job.pk)
            forms[kind], status = form, 400
        else:
            refused, status = "Choose what to import.", 400
    jobs.expire_stale(request.user)
    recent = ImportJob.objects.owned_by(request.user)[:RECENT_JOBS]
    context = {
        "aidaemon_form": forms[ImportJob.Kind.AIDAEMON.value],
        "openclaw_form": forms[ImportJob.Kind.OPENCLAW.value],
        "jobs": recent,
        "refused": refused,
        "max_upload": uploads.megabytes(uploads.MAX_UPLOAD_BYTES),
    }
    return render(request, "importers/import.html", context, status=status)


def import_job(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """One job; htmx polls its partial while it runs."""
    jobs.expire_stale(request.user)
    job = get_owned_or_404(ImportJob, request.user, pk=pk)
    return render_page(request, "importers/import_job.html", {"job": job})


# Your data: export everything, and import an export back


def data_context(request: HtmxHttpRequest, import_form: ImportForm | None = None) -> dict:
    archive_jobs.expire_stale(request.user)
    jobs.expire_stale(request.user)
    return {
        "exports": ExportJob.objects.owned_by(request.user)[:RECENT_JOBS],
        "imports": ImportJob.objects.owned_by(request.user).filter(kind=ImportJob.Kind.NEOTASK)[
            :RECENT_JOBS
        ],
        "import_form": import_form or ImportForm(ImportJob.Kind.NEOTASK),
        "max_upload": uploads.megabytes(uploads.MAX_UPLOAD_BYTES),
    }


def data_page(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "importers/data.html", data_context(request))


@require_POST
def data_export(request: HtmxHttpRequest) -> HttpResponse:
    job = archive_jobs.start(request.user)
    return redirect("data-export-job", pk=job.pk)


@require_POST
def data_import(request: HtmxHttpRequest) -> HttpResponse:
    if refused := oversized_upload(request, IMPORT_COMMAND):
        context = {**data_context(request), "refused": refused}
        return render(request, "importers/data.html", context, status=413)
    form = ImportForm(ImportJob.Kind.NEOTASK, request.POST, request.FILES)
    if not form.is_valid():
        return render(request, "importers/data.html", data_context(request, form), status=400)
    job = form.start(request.user)
    return redirect("import-job", pk=job.pk)


def export_job(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """One export; htmx polls its partial while it runs."""
    archive_jobs.expire_stale(request.user)
    job = get_owned_or_404(ExportJob, request.user, pk=pk)
    return render_page(request, "importers/export_job.html", {"job": job})


def export_download(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponseBase:
    return archive_response(request, get_owned_or_404(ExportJob, request.user, pk=pk))
