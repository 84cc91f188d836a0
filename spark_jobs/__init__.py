"""PySpark jobs over Tidelog topics (import name `tidelog.spark_jobs`), each runnable locally with
`python -m tidelog.spark_jobs.<job>` or `spark-submit spark_jobs/<job>.py` against `tidelog dev up`
(docs/spark.md)."""
