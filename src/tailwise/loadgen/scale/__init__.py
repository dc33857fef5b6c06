"""Stage 2 across workers: the ``driver`` runs one plan over a ``pool`` of local
processes or ``ray_workers``; each ``worker`` is the one-process engine on its share;
``merge`` joins their records; ``messages`` is what driver and workers say.
"""
