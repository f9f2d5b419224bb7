"""A real OpenID Connect provider for the single sign-on tests: panva's
oidc-provider (tests/oidc/provider.js, installed by `make oidc-provider`), run by
Node.js on a free port. Its accounts: alice (groups neotask-users and
neotask-terminal), bob (neotask-users), mallory (contractors only), nameless
(no preferred_username), alice-impostor and alice-fullwidth (other subjects
named alice, the second in fullwidth letters), and unsigned and hmac (whose ID
tokens come unsigned, or signed with the client secret). `sign_in` goes through
the provider's login form as a browser does."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
import requests

from tests.support.processes import ROOT, free_port, stop_process

PROVIDER_DIR = ROOT / "tests" / "oidc"
CLIENT_ID = "neotask-test"
CLIENT_SECRET = "neotask-test-secret-0123456789"


def skip_without_node() -> None:
    """Node.js is installed by `make test`; run by hand without it, the tests say so."""
    if shutil.which("node") is None:
        pytest.skip("Node.js is missing: `make test` installs it (make node oidc-provider)")
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("oidc-provider is not installed: run `make oidc-provider`")


class OIDCProvider:
    """oidc-provider on 127.0.0.1, for a Neotask at `app_url`."""

    def __init__(self, app_url: str, log: Path) -> None:
        self.port = free_port()
        self.app_url = app_url
        self.log_path = log
        self.process: subprocess.Popen[str] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self, **overrides: str) -> dict[str, str]:
        """The NEOTASK_OIDC_* variables of an app that signs in here."""
        variables = {
            "issuer": self.issuer,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "provider_name": "Test IdP",
            "scopes": "openid email profile groups",
            **overrides,
        }
        return {f"NEOTASK_OIDC_{key.upper()}": value for key, value in variables.items()}

    def sign_in(self, client: Any, login: str) -> Any:
        """A whole sign-in of the provider's account `login`, as a browser goes
        through it: Neotask's start page (with the Django test `client`), the
        provider's login form, and the callback back at Neotask, whose response
        this is."""
        browser = requests.Session()
        location = client.get("/accounts/oidc/start/")["Location"]
        response = browser.get(location, allow_redirects=False, timeout=10)
        while response.is_redirect:
            location = urljoin(location, response.headers["Location"])
            response = browser.get(location, allow_redirects=False, timeout=10)
        form = re.search(r'<form[^>]*action="([^"]+)"', response.text)
        assert form is not None, response.text[:500]
        location = urljoin(location, form.group(1))
        fields = {"prompt": "login", "login": login, "password": "any"}
        response = browser.post(location, data=fields, allow_redirects=False, timeout=10)
        while response.is_redirect:
            location = urljoin(location, response.headers["Location"])
            if location.startswith(self.app_url):  # back at Neotask, with the code
                return client.get(location.removeprefix(self.app_url))
            response = browser.get(location, allow_redirects=False, timeout=10)
        raise AssertionError(f"the provider did not send the browser back: {response.text[:500]}")

    def start(self, seconds: float = 30) -> None:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PORT": str(self.port),
            "CLIENT_ID": CLIENT_ID,
            "CLIENT_SECRET": CLIENT_SECRET,
            "REDIRECT_URI": f"{self.app_url}/accounts/oidc/callback/",
            "POST_LOGOUT_REDIRECT_URI": f"{self.app_url}/accounts/login/",
        }
        self.process = subprocess.Popen(
            ["node", "provider.js"],
            cwd=PROVIDER_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        ready = threading.Event()
        threading.Thread(target=self._copy_output, args=(ready,), daemon=True).start()
        if not ready.wait(seconds):
            self.stop()
            raise RuntimeError(f"oidc-provider did not start: see {self.log_path}")

    def _copy_output(self, ready: threading.Event) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.log_path, "a") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                if line.startswith("oidc-provider ready at"):
                    ready.set()

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, seconds=10)
            self.process = None

    def __enter__(self) -> OIDCProvider:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
