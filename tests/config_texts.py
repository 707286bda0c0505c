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
