"""Stage 1: from what the user wrote to a validated plan (``plan.Prepared``).

``plan`` checks every input before anything starts; ``trace_bodies``, ``exact_prompts``,
``documents``, ``images`` and ``image_rows`` build the bodies it sends; ``preflight``
sends one request per target after it, never through the engine.
"""
