"""/mcp under the MCP conformance suite (@modelcontextprotocol/conformance from
npm, tests/mcp_conformance, installed by `make mcp-conformance`): its initialize,
ping, tools-list and DNS-rebinding scenarios against a live daphne, each check
a success. The suite's client sends no token of its own: node loads
tests/mcp_conformance/bearer.mjs first, which adds alice's API token to every
request, as an MCP host configured with it does. On main the DNS-rebinding
scenario failed: a request with Host and Origin evil.example.com was answered 200."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import (
    ROOT,
    app_env,
    free_port,
    manage,
    run_program,
    start_daphne,
    stop_process,
)

SUITE_DIR = ROOT / "tests" / "mcp_conformance"
SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mcp_url(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """/mcp of a live Neotask on 127.0.0.1 (the suite's DNS-rebinding scenario
    wants a loopback URL), and a token of alice's, in NEOTASK_MCP_TOKEN's place."""
    if shutil.which("node") is None:
        pytest.skip("Node.js is missing: `make test` installs it (make node mcp-conformance)")
    if not (SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance").is_dir():
        pytest.fail("the MCP conformance suite is not installed: run `make mcp-conformance`")
    data = tmp_path_factory.mktemp("mcp-conformance")
    env = app_env(data)
    manage(env, "migrate", "-v0")
    token = run_program(env, "tests.programs.accounts:user_token", "alice")
    port = free_port()
    with (data / "daphne.log").open("w") as log:
        server = start_daphne(env, port, log)
    try:
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        stop_process(server)


def conformance(url: str, token: str, scenario: str, results: Path) -> list[dict]:
    """The checks of one scenario of the suite, run against `url` with `token`."""
    done = subprocess.run(
        [
            "node",
            "--import",
            "./bearer.mjs",
            "node_modules/@modelcontextprotocol/conformance/dist/index.js",
            "server",
            "--url",
            url,
            "--scenario",
            scenario,
            "--output-dir",
            str(results),
        ],
        cwd=SUITE_DIR,
        env={"PATH": os.environ["PATH"], "NEOTASK_MCP_TOKEN": token, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = list(results.glob("*/checks.json"))
    assert len(found) == 1, done.stdout + done.stderr
    checks = json.loads(found[0].read_text())
    assert checks, done.stdout
    failed = [check for check in checks if check["status"] != "SUCCESS"]
    assert not failed and done.returncode == 0, done.stdout + done.stderr
    return checks


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_mcp_passes_the_conformance_scenario(mcp_url, scenario, tmp_path):
    url, token = mcp_url
    checks = conformance(url, token, scenario, tmp_path)
    if scenario == "dns-rebinding-protection":
        assert {check["id"] for check in checks} == {
            "localhost-host-rebinding-rejected",
            "localhost-host-valid-accepted",
        }
