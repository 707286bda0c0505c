"""Pure values and decisions, no I/O: plans and the planner, progress values, exact offset
translation, what an earlier attempt copied from a source compacted since, group positions, failover
rules, the verification's plan, digest and verdicts, reports, metrics, the recovery point, a run's
turn, the DR window's summary, the transform chain at work, schema ids and which schemas travel, and
the JSON documents the steps hand each other.

Public surface: every module; each is importable where neither a Kafka client nor a database driver
is (``make lint`` forbids sockets, HTTP, subprocesses and database drivers here).
"""
