"""The flow DAG files, installed as the package ``mirrorflow_dags`` (see the README's deployment notes)."""
