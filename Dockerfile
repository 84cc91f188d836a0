# One image for every Tidelog service; the command picks the service.
FROM python:3.11-slim AS tidelog
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY services ./services
COPY operator ./operator
COPY spark_jobs ./spark_jobs
COPY scripts/install-image ./scripts/install-image
# A C compiler for the install only: setup.py builds the Kafka listener's record transcoder.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && PIP_NO_CACHE_DIR=1 scripts/install-image \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 tidelog \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp tidelog
# Pod Security "restricted": a non-root user the chart names by number (podSecurityContext), and
# nothing written outside /tmp and the data volumes (the root filesystem is read-only).
ENV HOME=/tmp PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
ENTRYPOINT ["tidelog"]

# Spark with Tidelog's data source and jobs (docs/spark.md): Java 17, PySpark from the `spark`
# extra, and an entrypoint that speaks Spark's Kubernetes contract (driver / executor), for
# spark-submit --master k8s:// and the Spark Operator's SparkApplication alike.
FROM python:3.11-slim AS spark
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY services ./services
COPY operator ./operator
COPY spark_jobs ./spark_jobs
COPY scripts/install-image ./scripts/install-image
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && PIP_NO_CACHE_DIR=1 scripts/install-image spark \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 185 --home-dir /app --no-create-home spark
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3
ENV PATH=$SPARK_HOME/bin:$PATH
COPY docker/spark-entrypoint.sh /opt/entrypoint.sh
USER 185
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/entrypoint.sh"]
