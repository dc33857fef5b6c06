"""The optional compiled fast path (C): built where a compiler is present, skipped where not.

Everything else about the package is in pyproject.toml. Without the extension tailwise
runs the same pure-Python path (tailwise.loadgen.sse_fast), only slower per stream chunk.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tailwise.loadgen.sse_c",
            sources=["src/tailwise/loadgen/sse_c.c"],
            optional=True,  # no compiler: install without it
        )
    ]
)
