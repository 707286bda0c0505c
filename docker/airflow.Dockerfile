# syntax=docker/dockerfile:1
# The images of docker-compose.yaml, built with the repo as context:
#   target airflow       every Airflow service (the copy task's Spark driver runs in it, client mode)
#   target spark-worker  the Spark workers: the official Spark 4.0.0 on this image's Python
# No project source is copied in: compose mounts the product's packages (include/mirrorflow,
# plugins/mirrorflow_airflow, dags/ as mirrorflow_dags, jobs/ as mirrorflow_jobs) under
# /opt/mirrorflow/python, laid out as an install lays them out, and config/ under /opt/mirrorflow.
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
ARG SPARK_IMAGE=apache/spark:4.0.0-scala2.13-java17-ubuntu

# Spark's Kafka connector jars, resolved from Maven Central from jvm/spark-kafka/pom.xml as
# scripts/setup.sh does (the pyspark wheel lacks them; spark-submit gets them from MIRROR_JVM_CACHE).
FROM maven:3.9-eclipse-temurin-17 AS spark-kafka-jars
COPY jvm/spark-kafka/pom.xml /build/pom.xml
RUN spark_version=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' /build/pom.xml) \
 && mvn -q -B -Dstyle.color=never -f /build/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
      -Dmdep.prependGroupId=true -DoutputDirectory="/jvm/spark-kafka-${spark_version}"

FROM ${SPARK_IMAGE} AS spark-dist

FROM ${AIRFLOW_IMAGE} AS airflow
USER root
# A JRE for spark-submit (found on PATH by spark-class; no JAVA_HOME needed, so any architecture).
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && apt-get autoremove -yqq --purge \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
# MIRROR_STATE_DIR's named volume is mounted at /opt/mirrorflow/state: a new volume takes the owner
# of this folder, so the Airflow user (and the workers, built from this image) can write to it.
RUN mkdir -p /opt/mirrorflow/state \
 && chown -R airflow:0 /opt/mirrorflow \
 && chmod -R g+rwX /opt/mirrorflow
USER airflow
# Exactly the pins the test suite runs with (the Airflow image's own way: pip into its venv). As in
# scripts/setup.sh, the full pyspark is reinstalled last: pyspark-client, a dependency of the Spark
# provider, overwrites pyspark/ with a Spark Connect-only build. pip's cache (the image's
# PIP_CACHE_DIR) is a build cache, not a layer: the pyspark sdist is built once, not twice.
COPY --chown=airflow:0 requirements.txt /opt/mirrorflow/requirements.txt
RUN --mount=type=cache,target=/tmp/.cache/pip,uid=50000,gid=0 \
    pip install -r /opt/mirrorflow/requirements.txt \
 && pip install --force-reinstall --no-deps "$(grep -E '^pyspark==' /opt/mirrorflow/requirements.txt)"
COPY --from=spark-kafka-jars --chown=airflow:0 /jvm /opt/mirrorflow/jvm
ENV MIRROR_JVM_CACHE=/opt/mirrorflow/jvm

# The workers' executors run the copy job's Python (mapInArrow with mirrorflow.record_writer:
# confluent-kafka, pyarrow) with the interpreter the driver names (PYSPARK_PYTHON, this image's
# python), and PySpark refuses a worker Python of another minor version: the official Spark image
# has Ubuntu's Python 3.10. So the workers are this image plus the official image's Spark.
FROM airflow AS spark-worker
COPY --from=spark-dist --chown=airflow:0 /opt/spark /opt/spark
ENV SPARK_HOME=/opt/spark
# Not Airflow's entrypoint (it would run `airflow <command>`): the worker JVM under dumb-init, which
# forwards signals; compose passes the worker's arguments and the master URL.
ENTRYPOINT ["/usr/bin/dumb-init", "--", "/opt/spark/bin/spark-class", "org.apache.spark.deploy.worker.Worker"]
CMD ["spark://spark-master:7077"]
