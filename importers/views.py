"""The import page: upload a file, then watch its job."""

from __future__ import annotations

import uuid

from django.http import HttpResponse
from django.shortcuts import redirect, render

from importers import jobs, uploads
from importers.forms import ImportForm
from importers.models import ImportJob
from neotask_site.htmx import HtmxHttpRequest, render_page
from neotask_site.ownership import get_owned_or_404

RECENT_JOBS = 10
# Room for the form fields and multipart boundaries around the file.
FORM_OVERHEAD = 64 * 1024


def import_page(request: HtmxHttpRequest) -> HttpResponse:
    forms = {kind: ImportForm(kind) for kind in ImportJob.Kind.values}
    status, refused = 200, ""
    if request.method == "POST":
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        if size > uploads.MAX_UPLOAD_BYTES + FORM_OVERHEAD:
            # Refused before the body is read: nothing of it is stored.
            refused = (
                f"The upload is {uploads.megabytes(size)}; uploads are limited to "
                f"{uploads.megabytes(uploads.MAX_UPLOAD_BYTES)}. Import a bigger file from the "
                "shell (python manage.py import_aidaemon / import_openclaw)."
            )
            status = 413
        elif (kind := request.POST.get("kind")) in ImportJob.Kind.values:
            form = ImportForm(kind, request.POST, request.FILES)
            if form.is_valid():
                upload = form.cleaned_data["file"]
                job = jobs.start(
                    request.user,
                    kind,
                    upload.name,
                    upload.chunks(),
                    form.cleaned_data["agent"],
                    form.cleaned_data["dry_run"],
                )
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
