#!/usr/bin/env python
"""Neotask's command-line utility for administrative tasks (neotask_site/__main__.py)."""

if __name__ == "__main__":
    from neotask_site.__main__ import main

    main()
