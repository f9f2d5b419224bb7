"""Moving in from other agents: aidaemon databases and OpenClaw agent folders.

The importers write into every app (events, facts, macros, tasks, prefixes,
sessions, memory files), so they live with the site, which wires the apps together.
"""
