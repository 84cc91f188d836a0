# One image for every Tidelog service; the command picks the service.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
COPY services ./services
COPY operator ./operator
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir .
ENTRYPOINT ["tidelog"]
