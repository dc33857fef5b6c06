"""What runs on the event loop: the engines, multi-turn sessions, and the loss watch.

``attack`` holds the pacer and the engines (open loop, closed loop for comparison),
``sessions`` the multi-turn conversations, ``watch`` the SLO-loss watch that stops a run
once it is decided. They send through the ``transport`` seam.
"""
