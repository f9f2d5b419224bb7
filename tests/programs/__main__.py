"""`python -m tests.programs MODULE:FUNCTION [ARG...]`: set up the app's Django
(its settings, as `manage.py` does), call FUNCTION of MODULE with the
JSON-decoded arguments, and print its result as JSON, on the last line."""

from __future__ import annotations

import importlib
import json
import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neotask_site.settings")
    django.setup()
    name, *arguments = sys.argv[1:]
    module, function = name.split(":")
    program = getattr(importlib.import_module(module), function)
    print(json.dumps(program(*(json.loads(argument) for argument in arguments))))


if __name__ == "__main__":
    main()
