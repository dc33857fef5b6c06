"""The optional compiled fast paths (C): built where a compiler is present, skipped where not.

Everything else about the package is in pyproject.toml. Without the extensions tailwise
runs the same pure-Python paths (tailwise.loadgen.transport.sse_fast, httptools alone for whole
HTTP answers, tailwise.records.format_rows for the records file), only slower per
stream chunk, per request and per record.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tailwise.loadgen.transport.sse_c",
            sources=["src/tailwise/loadgen/transport/sse_c.c"],
            depends=["src/tailwise/loadgen/transport/rx_c.h"],  # the stream reader (Linux), included
            optional=True,  # no compiler: install without it
        ),
        Extension(
            "tailwise.loadgen.transport.http_c",
            sources=["src/tailwise/loadgen/transport/http_c.c"],
            optional=True,
        ),
        Extension(
            "tailwise.loadgen.execute.writer_c",
            sources=["src/tailwise/loadgen/execute/writer_c.c"],
            optional=True,
        ),
    ]
)
