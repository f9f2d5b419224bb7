"""Django settings for Neotask.

Read from the environment (deployment: where data lives, which services) and
from config.toml (behaviour: memory, sessions, the LLM). A bad value stops
start-up with one line naming it — see core/config.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agent import sandbox
from core import client_address, profiles
from core.config import ConfigError, config_path, load_config
from monitoring import logs

BASE_DIR = Path(__file__).resolve().parent.parent
# The pages and static files live in this package, so that an installed wheel
# has them too (tests/test_packaging.py).
SITE_DIR = Path(__file__).resolve().parent

# Everything Neotask writes (the data dir, the database, secret key, workspaces,
# uploads) is its user's alone, whatever the umask of the shell that started it.
os.umask(0o077)

# numpy's BLAS in one thread (read when numpy is first imported, after the
# settings): a turn's matrix-vector product over the vector index takes ~4 ms
# either way on idle cores, but OpenBLAS's second thread spins while it waits for
# one, and on two cores shared with the other workers that doubled get_context's
# CPU time (memory_bench; docs/memory.md).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    DATA_DIR = profiles.data_dir(os.environ.get("NEOTASK_DATA_DIR"), BASE_DIR)
    NEOTASK = load_config(config_path(os.environ, BASE_DIR), os.environ)
    # No sandbox, no terminal: found at start-up, not at the first command.
    if sandbox_problem := sandbox.problem(NEOTASK["terminal"]):
        raise ConfigError(sandbox_problem)
    SECRET_KEY = profiles.secret_key(os.environ.get("NEOTASK_SECRET_KEY"), DATA_DIR)
    DEBUG = profiles.env_bool(os.environ, "NEOTASK_DEBUG", False)
    HTTPS = profiles.env_bool(os.environ, "NEOTASK_HTTPS", False)
    # Whose X-Forwarded-For is believed (the login throttle's address); none by default.
    TRUSTED_PROXIES = client_address.trusted_proxies(os.environ)
    client_address.refuse_rewriting_server(sys.argv)
    DATABASES = profiles.databases(os.environ.get("DATABASE_URL"), DATA_DIR)
    REDIS_URL = os.environ.get("REDIS_URL", "").strip() or None
    CHANNEL_LAYERS = profiles.channel_layers(REDIS_URL)
    CACHES = profiles.caches(
        REDIS_URL, prefix=os.environ.get("NEOTASK_QUEUE_NAME", "neotask"), directory=DATA_DIR
    )
    # Several installations sharing one Redis need a queue each.
    Q_CLUSTER = profiles.q_cluster(
        REDIS_URL, workers=2, name=os.environ.get("NEOTASK_QUEUE_NAME", "neotask")
    )
except ConfigError as exc:
    # One readable line instead of a traceback, for every entry point
    # (manage.py, daphne, the worker cluster).
    sys.stderr.write(f"neotask: configuration error: {exc}\n")
    raise SystemExit(2) from None

ALLOWED_HOSTS = profiles.env_list(os.environ, "NEOTASK_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = profiles.env_list(os.environ, "NEOTASK_CSRF_TRUSTED_ORIGINS", "")

# Behind an HTTPS proxy (docs/deploy.md): secure cookies, HSTS, redirects.
# Off by default, since `make run` serves plain HTTP on 127.0.0.1.
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # the proxy's health checks speak HTTP
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 60 * 60 * 24 * 365
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "django_q",
    # Its label is neotask_site (core/apps.py): the models' tables keep their names.
    "core",
    "memory",
    "agent",
    "sessions_app",
    "scheduler",
    "importers",
    "monitoring",
    "neotask_site",  # the project: the serve command and the template tags
]

MIDDLEWARE = [
    "monitoring.logs.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "core.middleware.RefuseNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "core.middleware.FirstRunMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "neotask_site.urls"
ASGI_APPLICATION = "neotask_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Before the apps' own (APP_DIRS), so that ours override admin's.
        "DIRS": [SITE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "neotask_site.navigation.navigation",
            ],
        },
    },
]

# Connections. The spec caps SQLite at 5 connections with WAL for concurrent
# reads. The embedded profile honours it this way: every chat socket's ORM work
# runs in Channels' one shared database thread, which keeps its connection
# (profiles.CONN_MAX_AGE; reopening it around each call cost a third of a
# turn's CPU); an HTTP request's ORM work runs in a thread of its own, whose
# connection closes with it; background jobs use `Q_CLUSTER["workers"]` (2)
# long-lived connections. WAL lets all of them read while one writes, and
# writers queue on the busy timeout rather than fail (tests/test_database.py
# sends concurrent requests and writes to prove it). PostgreSQL keeps its
# connections as long, with health checks.
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "core.throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Single sign-on ([oidc] in config.toml): answers only its callback.
    "neotask_site.oidc.OIDCBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = NEOTASK["server"]["time_zone"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# neotask_site/static is found as the app's (AppDirectoriesFinder); listing it in
# STATICFILES_DIRS too would find every file twice.
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
# Serve straight from the app folders: `make run` needs no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGGING = logs.logging_config(NEOTASK["server"]["log_format"], NEOTASK["server"]["verbose"])
