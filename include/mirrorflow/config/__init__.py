"""The configuration: an mm2.properties file (or a Strimzi ``KafkaMirrorMaker2`` spec) read into one
frozen model, every key a row of one table.

Public surface: ``model`` (``load_config``, ``MirrorConfig``, ``FlowConfig``, ``flows_for_dags``),
``keys`` (the key table and the names of this product's settings), ``clients`` (each Kafka client's
settings), ``dr``, ``run_options``, ``transforms``, ``schemas``, ``oauth``, ``state``, ``strimzi``,
``providers``, ``property_view.load_reference`` (a python hook by name) and ``key_classes.markdown``
(the README's key table). ``scopes``, ``key_values``, ``properties``, ``java_clients`` and
``flow_checks`` serve the loader.
"""
