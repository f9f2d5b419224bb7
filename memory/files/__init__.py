"""Memory files: each agent's MEMORY.md and memory/**/*.md, chunked, embedded and searchable.

One module per concern; callers import from the module that defines what they use:

- `workspace_fs`: every workspace path the server opens, from a descriptor of the
  workspace, never following a link (a sandboxed command can swap one in at any time);
- `paths`: which paths are memory files (`memory_path` keeps them inside the
  workspace), reading and atomic writing, saving only over what the editor opened;
- `discovery`: the files of a workspace with a stat each (nothing read), and the
  workspaces that have any;
- `chunking`: Markdown cut into chunks of whole lines under their headings;
- `indexing`: the files' state and chunks stored, their vectors computed;
- `search`: the chunks nearest a query, from the in-process or the LanceDB index.

Indexing happens on writes (the tools, the files page, documents added to memory
(`memory.documents`), the importer, after each terminal command) and in the
watcher job (`indexing.index_all_workspaces`, every minute), a stat per file when
nothing changed; a search and a GET of the files page only read.
"""
