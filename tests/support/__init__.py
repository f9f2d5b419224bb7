"""What the tests share, in one place: tests import from here, never from each
other (a test module holds tests; tests/conftest.py holds the shared fixtures).

- records: rows tests write (one of every owned model, tasks, facts, a logged-in
  session), the terminal permission, the jobs the writes queued
- web: what page tests send and read, a logged-in client, the project's URLs
- websocket: the chat socket in process (channels' communicator)
- processes: real Neotask processes (daphne, serve, the job cluster), their
  environments, live sockets, private PostgreSQL and Redis servers, and
  run_program, which runs tests/programs/ in the app's own Django
- browser: Chromium and the steps of the browser tests
- scripted_llm: the scripted OpenAI-compatible server
- tools, commands: the agent's tools and the management commands, run as a test runs them
- imports: an aidaemon database and import uploads
- embeddings, consolidation: stand-ins and material for those two
- files: writing and comparing files
- world: alice's marked world for the isolation tests
"""
