"""The one compiled module (everything else is in pyproject.toml): Kafka v2 records to stored
columns for the brokers' Kafka listener (src/tidelog/common/kafka_wire/_v2records.c). Optional: a
machine without a C compiler installs without it, and record_batches.py reads with aiokafka."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tidelog.common.kafka_wire._v2records",
            ["src/tidelog/common/kafka_wire/_v2records.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
