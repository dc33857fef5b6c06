"""Stage 2 in one process: ``local`` runs a prepared plan (clock, signals, drain) and
returns an Outcome; ``results`` streams records to the ``writer`` process, ``spill``
keeps memory flat, ``live`` publishes progress, ``looplag`` measures receive lag.
"""
