"""`neotask COMMAND` (the console script an installed wheel has) and `python -m
neotask_site COMMAND`: manage.py's commands, where no checkout's manage.py is."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neotask_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
