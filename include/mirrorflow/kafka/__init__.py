"""Every request this product sends to a Kafka cluster: the record traffic's connections and
ListOffsets (``connection``), Fetch and the range reads (``record_reads``, ``fetched_batches``),
Produce and writer allocation (``produce``), the control plane's admin client (``admin``), and MM2's
internal topics: heartbeats, offset syncs, checkpoints (``heartbeats``, ``offset_syncs``,
``internal_topics``). Every failure leaves as a ``mirrorflow.errors`` class naming the cluster.

Public surface: ``admin.ClusterAdmin`` and the internal topics' writers for ``app`` and ``store``'s
callers; ``connection``, ``record_reads``, ``fetched_batches`` and ``produce`` for ``copy`` (and the
control plane's range reads and writer allocation). The only package that imports a Kafka client
(``make lint``), besides ``copy.record_batches``' record codecs.
"""
