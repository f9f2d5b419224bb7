"""Moving in from other agents: aidaemon databases and OpenClaw agent folders.

The importers write into every app (events, facts, macros, tasks, prefixes,
sessions, memory files); nothing imports them but their commands, their page
and its jobs, so they are an app of their own that depends on the others.
"""
