"""``check-config``'s report of a config, without the cluster reads (``describe(topics=False)``)."""

from __future__ import annotations

import io

from mirrorflow.app.check_config import describe
from mirrorflow.config.model import parse_config

PLAIN = """\
clusters = a, b
a.bootstrap.servers = a1:9092
b.bootstrap.servers = b1:9092
a->b.enabled = true
replication.factor = -1
checkpoints.topic.replication.factor = -1
heartbeats.topic.replication.factor = 2
"""


def _report(text: str, env: dict[str, str]) -> list[str]:
    out = io.StringIO()
    describe(parse_config(text, env=env), out, topics=False)
    return out.getvalue().splitlines()


def test_a_plain_mm2_file_gets_the_default_state_folder_and_is_told_when_to_replace_it() -> None:
    lines = _report(PLAIN, {"AIRFLOW_HOME": "/srv/airflow"})

    assert lines[1:3] == [
        "state folder /srv/airflow/mirrorflow (the default, in Airflow's home)",
        "  fine on one machine; with several Airflow workers, or Spark's cluster deploy mode, set "
        "mirrorflow.state.dir (or env MIRROR_STATE_DIR) to a folder they all share and set "
        "mirrorflow.offsets.db.url (or env MIRROR_OFFSETS_DB_URL) to a PostgreSQL database",
    ]
    assert (
        "  replication factors (remote topics; offset syncs, checkpoints, heartbeats): broker default; 3, "
        "broker default, 2"
    ) in lines


def test_a_shared_state_folder_and_postgresql_need_no_advice() -> None:
    env = {"MIRROR_STATE_DIR": "/shared/mirror", "MIRROR_OFFSETS_DB_URL": "postgresql://db/mirror"}

    lines = _report(PLAIN, env)

    assert lines[1] == "state folder /shared/mirror (env MIRROR_STATE_DIR)"
    assert lines[2] == "flow a->b"
