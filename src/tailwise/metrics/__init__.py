"""Metrics: everything derived from records, computed in batches off the hot path."""
