"""Airflow glue for mirrorflow: error classification for tasks (and, later, UI views)."""
