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
