"""The one thing pyproject.toml cannot declare stably: sparklog's C extension, the Kafka
record-batch codec (``sparklog.model._kafka_batches``, DESIGN §14), compiled from source at
``pip install``. ``make venv`` first makes sure a C compiler and the Python headers are there
(``scripts/ensure-compiler.sh``)."""

from pathlib import Path

from setuptools import Extension, setup

SOURCES = Path("sparklog/model/kafka_batches_c")

setup(
    ext_modules=[
        Extension(
            "sparklog.model._kafka_batches",
            sources=[str(SOURCES / f) for f in ("module.c", "crc32c.c", "records.c", "read.c", "write.c", "arrow.c")],
            depends=[str(SOURCES / "batches.h")],
            extra_compile_args=["-std=c11", "-O2", "-fvisibility=hidden", "-Wall", "-Wextra"],
        )
    ]
)
