"""The offsets database: where a flow's progress lives, on any SQLAlchemy URL (a SQLite file by
default, PostgreSQL in production). The only package that speaks SQL.

Public surface, what the rest of the product uses (``make lint`` keeps every other module of the
package private to it):
- ``offsets_store.OffsetsStore``: progress, commits (with the batch log, gaps, metrics and the
  recovery point), the metrics history;
- ``flow_lock``: a flow's lock, all its SQL: taken, released, renewed by a DR window's lease, and
  passed from one window to the next;
- ``run_documents``: what a run's steps hand each other (plan, copy result, window summary, verify);
- ``checkpoint_log``: the checkpoints emitted and their latencies;
- ``status_reads`` and ``read_model``: the status page's and the command line's reads and values;
- ``cli``: ``python -m mirrorflow.store``.
Private: the tables (``tables``), rows (``rows``), the engine (``database``) and the steps inside the
store's transactions (``batch_log``, ``partition_errors``, ``recovery_log``, ``retention``).
"""
