"""Built-in targets that run on loopback, with latency laws known in closed form."""
