"""Settings for the test suite: the real settings, isolated from the developer's
data dir and config.toml."""

import atexit
import os
import shutil
import tempfile

_data_dir = tempfile.mkdtemp(prefix="neotask-test-")
atexit.register(shutil.rmtree, _data_dir, ignore_errors=True)
os.environ["NEOTASK_DATA_DIR"] = _data_dir
os.environ["NEOTASK_CONFIG"] = ""
# The bundled SmolLM2 (already installed): the suite never downloads the 491 MB default,
# and the servers it starts (serve, local_llm) inherit this.
os.environ["NEOTASK_LLM_LOCAL_MODEL"] = "smollm2"

from neotask_site.settings import *  # noqa: E402, F403
from neotask_site.settings import CACHES as SITE_CACHES  # noqa: E402
from neotask_site.settings import Q_CLUSTER as SITE_Q_CLUSTER  # noqa: E402

# Password hashing is deliberately slow; tests create many users.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Each test run has its own job queue, even on a Redis shared with other runs.
Q_CLUSTER = {**SITE_Q_CLUSTER, "name": f"neotask-test-{os.getpid()}"}
CACHES = {name: {**cache, "KEY_PREFIX": Q_CLUSTER["name"]} for name, cache in SITE_CACHES.items()}
