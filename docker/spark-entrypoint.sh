#!/bin/sh
# The Spark image's entrypoint (Dockerfile, stage `spark`). On Kubernetes, Spark starts the driver
# pod with the argument `driver` and executor pods with `executor`, and passes what they need in
# environment variables (SPARK_DRIVER_BIND_ADDRESS, SPARK_DRIVER_URL, SPARK_EXECUTOR_*); anything
# else is run as given (e.g. `spark-submit ...` from a Job).
set -eu
case "${1:-}" in
    driver)
        shift
        exec spark-submit \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        exec java -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
            ${SPARK_JAVA_OPT_0:-} \
            -cp "${SPARK_HOME}/jars/*" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "${SPARK_DRIVER_URL}" \
            --executor-id "${SPARK_EXECUTOR_ID}" \
            --cores "${SPARK_EXECUTOR_CORES}" \
            --app-id "${SPARK_APPLICATION_ID}" \
            --hostname "${SPARK_EXECUTOR_POD_IP}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME}"
        ;;
    *)
        exec "$@"
        ;;
esac
