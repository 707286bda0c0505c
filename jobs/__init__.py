"""The Spark entrypoints, installed as the package ``mirrorflow_jobs``: spark-submit runs these files."""
