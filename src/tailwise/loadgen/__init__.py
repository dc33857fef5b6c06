"""Open-loop load generation: targets -> attack (pacer + engine) -> transport -> results.

File names follow the pipeline (after vegeta's ``lib/``): ``targets`` builds the
requests, ``attack`` paces them on the intended schedule, ``transport`` sends
them, ``results`` writes records, ``runner`` ties a run together.
"""
