"""The key table's section of this product's own settings (``mirrorflow.*``; MM2 ignores them): one
row each, with its kind, default, choices and what it does, from which ``config.key_values`` reads a
flow's settings and ``make readme-keys`` writes the README's table of them. ``FLOW_SETTINGS`` may be
written at top level (every flow) or as ``<source>-><target>.<key>``, ``TOP_LEVEL_SETTINGS`` at top
level only.

Invariants: a setting with choices defaults to its first; a number without a default is optional
(none when absent or empty); settings that share a note are one row of the README's table.
"""

from __future__ import annotations

from mirrorflow.config.keys import (
    AIRFLOW_POOL,
    AIRFLOW_QUEUE,
    ALERT_HEARTBEAT_AGE_MAX_SECONDS,
    ALERT_LAG_MAX_RECORDS,
    ALERT_NOTIFIER,
    COPY_TIMEOUT,
    DR_HANDOVER_WAIT,
    DR_IDLE_WAIT_MS,
    DR_TRIGGER_INTERVAL_MS,
    DR_WINDOW_SECONDS,
    LOCK_WAIT,
    MAX_RECORDS_PER_PARTITION,
    MODE,
    OFFSETS_DB_URL,
    ON_PARTITION_ERROR,
    ON_SOURCE_DATA_LOSS,
    REVERSE_CHECKPOINTS,
    SCHEDULE,
    SCHEMA_FRAMED_KEYS,
    SCHEMA_FRAMED_VALUES,
    SCHEMA_PLAIN_KEYS,
    SCHEMA_PLAIN_VALUES,
    SCHEMA_REGISTRY,
    SCHEMA_REGISTRY_CLIENT_KEYS,
    SCHEMA_REGISTRY_SIDES,
    SCHEMA_STRATEGIES,
    SCHEMA_SUBJECTS_EXCLUDE,
    SCHEMA_SUBJECTS_INCLUDE,
    SPARK_CONF_PREFIX,
    SPARK_CONN_ID,
    SPARK_DEPLOY_MODE,
    STATE_DIR,
    TASK_RETRIES,
    H,
    Key,
)


def _ours(
    name: str,
    note: str,
    default: str = "",
    kind: str = "text",
    choices: tuple[str, ...] = (),
    shown: str = "",
) -> Key:
    return Key(name, H, note, default, kind, choices=choices, shown=shown)


_REGISTRY_URL = (
    "the source and target clusters' schema registries (Confluent's API): with both, schemas travel with the "
    "data (see Schemas); one alone is a config error"
)
_REGISTRY_CLIENT = (
    "each registry's login and TLS, as Confluent's client takes them (`user:password`, PEM files); through "
    "config providers"
)
_SUBJECTS = "regular expressions (comma-separated, matching whole names) narrowing the subjects that travel"
_FRAMED = (
    "regular expressions (comma-separated, matching whole source topic names): the topics whose keys, or "
    "values, are in Confluent's wire format; their schema ids are mapped, a record whose id the sync did not "
    "map is refused (see Schemas)"
)
_PLAIN = (
    "the same, for keys or values never in the wire format: passed byte for byte, never looked at. A side "
    "declared neither way is never changed, and a record there whose bytes carry the id of a schema the sync "
    "read is refused; a side declared both ways is an error"
)

FLOW_SETTINGS: tuple[Key, ...] = (
    _ours(
        SCHEDULE,
        "the flow DAG's schedule: cron or `@hourly` etc.",
        shown="none (manual runs)",
    ),
    _ours(
        MAX_RECORDS_PER_PARTITION,
        "per-run cap of records per partition; the rest is left for the next run",
        default="1000000",
        kind="pos",
    ),
    _ours(
        SPARK_CONN_ID,
        "the Airflow connection whose host is the Spark master",
        default="spark_default",
    ),
    _ours(
        SPARK_DEPLOY_MODE,
        (
            "where the copy, window and verify jobs' Spark driver runs: `client` (in the Airflow task) or "
            "`cluster` (on the cluster; see Spark cluster below). It replaces the connection's `deploy-mode` "
            "extra; `mirrorflow.spark.conf.spark.submit.deployMode` is refused, naming this key"
        ),
        default="client",
        choices=("client", "cluster"),
    ),
    _ours(
        SPARK_CONF_PREFIX + "*",
        (
            "any Spark setting for the copy and verify jobs, e.g. "
            "`mirrorflow.spark.conf.spark.executor.memory = 2g`. Both set `spark.speculation = false` (a "
            "duplicate task attempt would race the real one) and `spark.ui.showConsoleProgress = false`; the "
            "copy job also sets `spark.driver.extraJavaOptions = -XX:TieredStopAtLevel=1`: its JVM decodes "
            "nothing, and the JIT's first tier alone starts it about 1 s sooner. Setting a key replaces its "
            "default (keep `-XX:TieredStopAtLevel=1` when adding driver JVM options)"
        ),
        shown="see meaning",
    ),
    _ours(
        COPY_TIMEOUT,
        (
            "a copy attempt running longer is stopped: Airflow kills its Spark job (driver, Python driver "
            "and workers) and nothing of it is committed; the next attempt or run skips what it wrote"
        ),
        default="21600",
        kind="pos",
        shown="`21600` (6 h)",
    ),
    _ours(
        ON_SOURCE_DATA_LOSS,
        (
            "`fail`: a run whose next source records were deleted before they were mirrored fails, naming "
            "every lost range; `skip`: it continues after them and records each gap (`mirror_gaps`, the run "
            "report)"
        ),
        default="fail",
        choices=("fail", "skip"),
    ),
    _ours(
        ON_PARTITION_ERROR,
        (
            "`fail`: a partition's error that a retry would meet again (a refused write, a batch the target "
            "refuses, a failing transform) fails the whole run, committing nothing; `isolate`: the run "
            "commits the other partitions, records the failed one with its error, and fails at the end (see "
            "Transforms and per-partition isolation)"
        ),
        default="fail",
        choices=("fail", "isolate"),
    ),
    _ours(
        TASK_RETRIES,
        (
            "Airflow retries of each task of the flow's DAG (30 s apart); the flow's lock outlives every "
            "copy attempt: (retries + 1) x (timeout + 30 s) + 1 h"
        ),
        default="2",
        kind="int",
    ),
    _ours(
        AIRFLOW_QUEUE,
        (
            "the Airflow queue of every task of the flow's DAGs (run, cutover, failover): with the "
            "CeleryExecutor, workers started with `airflow celery worker --queues <queue>` near the flow's "
            "target run its control plane and its spark-submit, as MM2's dedicated mode runs near the target"
        ),
        shown="Airflow's default queue",
    ),
    _ours(
        AIRFLOW_POOL,
        (
            "the Airflow pool of every task of the flow's DAGs (create it in Airflow first), to bound how "
            "many of a group of flows' tasks run at once"
        ),
        shown="Airflow's `default_pool`",
    ),
    _ours(
        REVERSE_CHECKPOINTS,
        (
            "on a flow `backup->primary` whose opposite flow `primary->backup` is enabled: its checkpoints "
            "also translate each group's positions on `primary.*` remote topics on `backup` back to their "
            "topics on `primary`, exactly, for a failback (see Failback); refused without the opposite flow "
            "or with `emit.checkpoints.enabled = false`"
        ),
        default="false",
        kind="bool",
    ),
    _ours(
        LOCK_WAIT,
        (
            "the `plan` task (or a DR window's `start`) that finds its flow locked by another run waits up "
            "to this long for the lock, looking every second, then fails naming the holder; `0` fails at "
            "once. The wait holds the task's worker slot: a batch run's long wait is its `wait_for_turn` "
            "sensor's (trigger param `lock_wait_timeout_seconds`), so this one only covers a run that took "
            "the lock between the sensor and the plan, or a DR window's predecessor still releasing it; a "
            "crashed run's lock is only taken over once it expires"
        ),
        default="60",
        kind="int",
    ),
    _ours(
        ALERT_LAG_MAX_RECORDS,
        (
            "a run that leaves any partition more than this many records behind fails its `freshness` task, "
            "naming every such partition (backfill runs are not checked: they lag on purpose)"
        ),
        kind="int",
    ),
    _ours(
        ALERT_HEARTBEAT_AGE_MAX_SECONDS,
        (
            "a run after which the newest mirrored heartbeat is older than this (or absent) fails its "
            "`freshness` task; set it above the schedule's interval"
        ),
        kind="pos",
    ),
    _ours(
        ALERT_NOTIFIER,
        (
            "`module:attribute` of an Airflow notifier or failure callback (e.g. an `SmtpNotifier(...)` "
            "instance in a module of `plugins/`), called when `freshness` fails; an unimportable name is an "
            "import error of the DAG file naming this key"
        ),
    ),
    _ours(
        MODE,
        (
            "`dr`: each run is a window of micro-batches in one Spark application (see DR mode); the DAG "
            "becomes `start -> window -> report -> freshness -> release`, a run every "
            "`mirrorflow.dr.window.seconds`, two at a time"
        ),
        default="batch",
        choices=("batch", "dr"),
    ),
    _ours(
        DR_WINDOW_SECONDS,
        (
            "DR mode: how long one window runs micro-batches before it hands the flow over to the next one, "
            "and how often the next one starts; its copy task's timeout is this plus "
            "`mirrorflow.dr.handover.wait.seconds` and `mirrorflow.copy.timeout.seconds`. Set on a batch "
            "flow, it is warned about by name"
        ),
        default="600",
        kind="pos",
    ),
    _ours(
        DR_IDLE_WAIT_MS,
        "DR mode: the pause after a micro-batch that found nothing new",
        default="250",
        kind="int",
    ),
    _ours(
        DR_TRIGGER_INTERVAL_MS,
        (
            "DR mode: the least time from one micro-batch's start to the next one's (0: back to back). Each "
            "micro-batch costs a plan, a copy and a commit however few records it holds; with several DR "
            "flows on few cores, 200 keeps them up (see Performance) at up to that much more latency"
        ),
        default="0",
        kind="int",
    ),
    _ours(
        DR_HANDOVER_WAIT,
        (
            "DR mode: how long a window goes on past its end while no next window is up to take the flow "
            "over (0: it ends on time)"
        ),
        default="600",
        kind="int",
    ),
    *(_ours(f"{SCHEMA_REGISTRY}{side}.url", _REGISTRY_URL) for side in SCHEMA_REGISTRY_SIDES),
    *(
        _ours(f"{SCHEMA_REGISTRY}{side}.{key}", _REGISTRY_CLIENT)
        for side in SCHEMA_REGISTRY_SIDES
        for key in SCHEMA_REGISTRY_CLIENT_KEYS
        if key != "url"
    ),
    _ours(SCHEMA_SUBJECTS_INCLUDE, _SUBJECTS, ".*"),
    _ours(SCHEMA_SUBJECTS_EXCLUDE, _SUBJECTS),
    _ours(
        SCHEMA_STRATEGIES,
        (
            "the subject name strategies the source's serializers use (short names, or the Java serializers' "
            "class names), whose subjects the sync reads for each mirrored topic; any other is refused at "
            "load"
        ),
        "TopicNameStrategy, TopicRecordNameStrategy, RecordNameStrategy",
    ),
    _ours(SCHEMA_FRAMED_KEYS, _FRAMED),
    _ours(SCHEMA_FRAMED_VALUES, _FRAMED),
    _ours(SCHEMA_PLAIN_KEYS, _PLAIN),
    _ours(SCHEMA_PLAIN_VALUES, _PLAIN),
)
TOP_LEVEL_SETTINGS: tuple[Key, ...] = (
    _ours(
        STATE_DIR,
        (
            "each run's folder (plan, result, reports), the metrics files and the default SQLite offsets "
            "database, relative to the config file's folder; env `MIRROR_STATE_DIR` wins (top level only)"
        ),
        shown=(
            "`$AIRFLOW_HOME/mirrorflow` (`~/airflow/mirrorflow` without `AIRFLOW_HOME`); the demo's config "
            "sets `../.state`, the checkout's `.state`"
        ),
    ),
    _ours(
        OFFSETS_DB_URL,
        (
            "the offsets table; env `MIRROR_OFFSETS_DB_URL` wins (top level only); a URL SQLAlchemy cannot "
            "parse, or of an unknown dialect, is a config error"
        ),
        shown="`sqlite:///<state dir>/offsets.db`",
    ),
)
