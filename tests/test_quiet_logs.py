"""Plain logs are for a terminal: warnings and errors only, unless verbose
(`manage.py serve --verbose`, [server] verbose); JSON logs keep every line."""

from __future__ import annotations

import io
import logging
import logging.config
import os

import pytest

from monitoring.logs import logging_config
from neotask_site.management.commands.serve import web_server_command


@pytest.fixture
def console():
    """What the console handler of a logging configuration writes, in isolation."""
    configured = []

    def configure(log_format: str, verbose: bool) -> tuple[logging.Logger, io.StringIO]:
        config = logging_config(log_format, verbose)
        stream = io.StringIO()
        handler = logging.config.DictConfigurator(config).configure_handler(
            {**config["handlers"]["console"], "formatter": None, "stream": stream}
        )
        logger = logging.getLogger(f"tests.quiet.{len(configured)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        configured.append(logger)
        return logger, stream

    yield configure
    for logger in configured:
        logger.handlers.clear()


@pytest.mark.parametrize(
    ("log_format", "verbose", "shown"),
    [("plain", False, False), ("plain", True, True), ("json", False, True)],
)
def test_it_shows_info_lines_only_when_verbose_or_json(console, log_format, verbose, shown):
    logger, stream = console(log_format, verbose)
    logger.info("Q Cluster starting.")
    logger.warning("a warning")
    logger.error("an error")
    written = stream.getvalue()
    assert ("Q Cluster starting." in written) == shown
    assert "a warning" in written and "an error" in written


def test_the_web_server_keeps_an_access_log_only_when_verbose(settings):
    quiet = web_server_command("127.0.0.1", 8000, verbose=False)
    assert quiet[quiet.index("--access-log") + 1] == os.devnull
    assert "--access-log" not in web_server_command("127.0.0.1", 8000, verbose=True)
    # JSON logs have Neotask's own line per request instead (monitoring.logs).
    settings.NEOTASK = {
        **settings.NEOTASK,
        "server": {**settings.NEOTASK["server"], "log_format": "json"},
    }
    verbose_json = web_server_command("127.0.0.1", 8000, verbose=True)
    assert verbose_json[verbose_json.index("--access-log") + 1] == os.devnull
