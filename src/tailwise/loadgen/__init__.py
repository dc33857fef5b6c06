"""Open-loop load generation, as a pipeline a reader can follow downward.

A run: ``runner`` (chooses) -> ``prepare/`` (options -> a validated plan) ->
``execute/`` (one process: ``engine/``'s pacer and engines over the ``transport/``
seam and its HTTP, ``results`` streaming records to ``writer``) or ``scale/`` (the
same engine in worker processes or Ray actors, merged into one run) -> ``conclude``
(summary, verdict, files). ``llm/`` says what an LLM server is asked and answers;
``observe/`` watches the server beside the load. ``sweep`` runs one such run per
offered rate. Each sub-package imports only those below it (tests/test_architecture.py);
docs/architecture.md draws the whole house.
"""
