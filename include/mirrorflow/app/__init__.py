"""The steps the DAGs and the Spark jobs call, each tying config, core decisions, the offsets store
and the clusters together: a batch run (``batch_run``), a DR window (``dr_window``) and its
micro-batches (``micro_batch``), drivers of one ``flow_session.FlowSession``; a window's lease,
checkpoints, remote topics, schema sync, dry run, check-config, verify, cutover, failover, freshness,
the status page's model, the copy guard and the DAG specs. Never imports airflow.

Public surface: every module's public functions; plugins/, dags/ and jobs/ call nothing below this
package but the config loader and the Spark modules of ``copy``.
"""
