"""The server beside the load: its ``/metrics`` scraped (``server_metrics``), its GPUs
sampled (``gpu_metrics``), its own configuration read once (``server_props``), and what
it said of its work set beside what the client measured (``server_view``).
"""
