"""Programs the tests run in processes of their own.

Most are functions run in the Django of the app under test, with its settings and
database as the environment names them: tests.support.processes.run_program(env,
function, *arguments) runs `python -m tests.programs MODULE:FUNCTION [ARG...]`
(__main__.py), which calls the function with the arguments (JSON) and prints what
it returns (JSON). A few stand alone: each says in its docstring how it is run.
"""
