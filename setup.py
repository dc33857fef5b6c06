"""The optional compiled fast paths (C): built where a compiler is present, skipped where not.

Everything else about the package is in pyproject.toml. Without the extensions tailwise
runs the same pure-Python path (tailwise.loadgen.sse_fast, and httptools alone for
whole HTTP answers), only slower per stream chunk and per request.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tailwise.loadgen.sse_c",
            sources=["src/tailwise/loadgen/sse_c.c"],
            optional=True,  # no compiler: install without it
        ),
        Extension(
            "tailwise.loadgen.http_c",
            sources=["src/tailwise/loadgen/http_c.c"],
            optional=True,
        ),
    ]
)
