"""Open-loop load generation, as a pipeline a reader can follow downward.

A run: ``runner`` (chooses) -> ``prepare`` (options -> a validated plan) ->
``execute`` (one process: ``attack``'s pacer and engine over ``transport`` /
``http``, ``results`` streaming records to ``writer``) or ``scale`` (the same
engine in worker processes, ``scale_worker``, or Ray actors, ``ray_workers``,
merged by ``scale_merge``) -> ``conclude`` (summary, verdict, files). ``sweep``
runs one such run per offered rate. File names follow the pipeline (after
vegeta's ``lib/``); docs/architecture.md draws the whole house.
"""
