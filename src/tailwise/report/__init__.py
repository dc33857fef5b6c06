"""Reporters: plain functions of a summary (and, for plots, of records)."""
