"""Config texts shared by the unit tests that parse a config without any cluster behind it."""

# One enabled flow, primary->backup, with made-up bootstrap servers and the state folder every config
# must name; tests append the keys they exercise.
ONE_FLOW = """\
clusters = primary, backup
primary.bootstrap.servers = p1:9092
backup.bootstrap.servers = b1:9092
primary->backup.enabled = true
mirrorflow.state.dir = /var/lib/mirrorflow
"""

# The model's tests: two bootstrap servers on primary; without a state folder (the default's then: the
# state-dir tests add their own), or with one.
STATELESS = """\
clusters = primary, backup
primary.bootstrap.servers = p1:9092,p2:9092
backup.bootstrap.servers = b1:9092
primary->backup.enabled = true
"""
BASE = STATELESS + "mirrorflow.state.dir = /var/lib/mirrorflow\n"
NO_ENV: dict[str, str] = {}
STATE_ENV = {"MIRROR_STATE_DIR": "/var/lib/mirrorflow"}

# What an unknown mirrorflow setting's message lists, in the key table's order.
KNOWN_SETTINGS = (
    "mirrorflow.schedule, mirrorflow.max.records.per.partition, mirrorflow.spark.conn.id, "
    "mirrorflow.spark.deploy.mode, mirrorflow.spark.conf.<spark key>, mirrorflow.copy.timeout.seconds, "
    "mirrorflow.on.source.data.loss, mirrorflow.on.partition.error, mirrorflow.task.retries, "
    "mirrorflow.airflow.queue, mirrorflow.airflow.pool, mirrorflow.reverse.checkpoints.enabled, "
    "mirrorflow.lock.wait.seconds, mirrorflow.alert.lag.max.records, "
    "mirrorflow.alert.heartbeat.age.max.seconds, mirrorflow.alert.notifier, mirrorflow.mode, "
    "mirrorflow.dr.window.seconds, mirrorflow.dr.idle.wait.ms, mirrorflow.dr.trigger.interval.ms, "
    "mirrorflow.dr.handover.wait.seconds, mirrorflow.schema.registry.source.url, "
    "mirrorflow.schema.registry.target.url, mirrorflow.schema.registry.source.basic.auth.user.info, "
    "mirrorflow.schema.registry.source.ssl.ca.location, "
    "mirrorflow.schema.registry.source.ssl.certificate.location, "
    "mirrorflow.schema.registry.source.ssl.key.location, "
    "mirrorflow.schema.registry.target.basic.auth.user.info, "
    "mirrorflow.schema.registry.target.ssl.ca.location, "
    "mirrorflow.schema.registry.target.ssl.certificate.location, "
    "mirrorflow.schema.registry.target.ssl.key.location, mirrorflow.schema.registry.subjects.include, "
    "mirrorflow.schema.registry.subjects.exclude, mirrorflow.schema.registry.subject.name.strategies, "
    "mirrorflow.schema.registry.framed.key.topics, mirrorflow.schema.registry.framed.value.topics, "
    "mirrorflow.schema.registry.plain.key.topics, mirrorflow.schema.registry.plain.value.topics, "
    "mirrorflow.state.dir, mirrorflow.offsets.db.url"
)
