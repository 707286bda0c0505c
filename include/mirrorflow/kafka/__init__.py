"""Every request this product sends to a Kafka cluster: the record traffic's connections and
ListOffsets (``connection``), Fetch and the range reads (``record_reads``, ``fetched_batches``),
Produce (``produce``), the flow writer's transactions (``transactions``), the control plane's admin
client (``admin``), the schema registries (``schema_registry``), and MM2's internal topics:
heartbeats, offset syncs, checkpoints (``heartbeats``, ``offset_syncs``, ``internal_topics``). Every
failure leaves as a ``mirrorflow.errors`` class naming the cluster, by the rules of ``faults``.

Public surface: ``admin.ClusterAdmin`` and the internal topics' writers for ``app`` and ``store``'s
callers; ``connection``, ``record_reads``, ``fetched_batches``, ``produce`` and ``transactions`` for
``copy`` (and the control plane's range reads). The only package that imports a Kafka client
(``make lint``), besides ``copy.record_batches``' record codecs.
"""
