"""mirrorflow: Kafka cross-cluster mirroring as bounded batch runs, MirrorMaker 2 compatible.

This package never imports airflow. pyspark is imported only by ``mirrorflow.copy.spark_copy``.
"""
