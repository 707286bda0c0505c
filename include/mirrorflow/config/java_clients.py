"""The configuration keys of Kafka's Java clients (consumer, producer and admin of kafka-clients 4.3,
``ConsumerConfig.configNames()`` and the others, and the two of 3.9 that 4.0 removed): every client
setting an MM2 config may hold.
``mirrorflow.config.keys`` says what this product does with each."""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    """Names separated by white space: long lists read better as text than one name per line."""
    return frozenset(text.split())


JAVA_CLIENT_KEYS = _names(
    """
    acks allow.auto.create.topics auto.commit.interval.ms auto.include.jmx.reporter auto.offset.reset
    batch.size
    bootstrap.controllers bootstrap.servers buffer.memory check.crcs client.dns.lookup client.id
    client.rack compression.gzip.level compression.lz4.level compression.type compression.zstd.level
    config.providers connections.max.idle.ms default.api.timeout.ms delivery.timeout.ms
    enable.auto.commit enable.idempotence enable.metrics.push exclude.internal.topics fetch.max.bytes
    fetch.max.wait.ms fetch.min.bytes group.id group.instance.id group.protocol group.remote.assignor
    heartbeat.interval.ms interceptor.classes internal.leave.group.on.close
    internal.throw.on.fetch.stable.offset.unsupported
    isolation.level key.deserializer key.serializer linger.ms max.block.ms
    max.in.flight.requests.per.connection max.partition.fetch.bytes max.poll.interval.ms
    max.poll.records max.request.size metadata.max.age.ms metadata.max.idle.ms
    metadata.recovery.rebootstrap.trigger.ms metadata.recovery.strategy metric.reporters
    metrics.num.samples metrics.recording.level metrics.sample.window.ms partition.assignment.strategy
    partitioner.adaptive.partitioning.enable partitioner.availability.timeout.ms partitioner.class
    partitioner.ignore.keys receive.buffer.bytes reconnect.backoff.max.ms reconnect.backoff.ms
    request.timeout.ms retries retry.backoff.max.ms retry.backoff.ms sasl.client.callback.handler.class
    sasl.jaas.config sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin
    sasl.kerberos.service.name sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
    sasl.login.callback.handler.class sasl.login.class sasl.login.connect.timeout.ms
    sasl.login.read.timeout.ms sasl.login.refresh.buffer.seconds sasl.login.refresh.min.period.seconds
    sasl.login.refresh.window.factor sasl.login.refresh.window.jitter sasl.login.retry.backoff.max.ms
    sasl.login.retry.backoff.ms sasl.mechanism sasl.oauthbearer.assertion.algorithm
    sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
    sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include
    sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.private.key.file
    sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.template.file
    sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret
    sasl.oauthbearer.clock.skew.seconds sasl.oauthbearer.expected.audience
    sasl.oauthbearer.expected.issuer sasl.oauthbearer.header.urlencode
    sasl.oauthbearer.jwks.endpoint.refresh.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.url
    sasl.oauthbearer.jwt.retriever.class sasl.oauthbearer.jwt.validator.class sasl.oauthbearer.scope
    sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url security.protocol security.providers send.buffer.bytes
    session.timeout.ms share.acknowledgement.mode share.acquire.mode
    socket.connection.setup.timeout.max.ms socket.connection.setup.timeout.ms ssl.cipher.suites
    ssl.enabled.protocols ssl.endpoint.identification.algorithm ssl.engine.factory.class
    ssl.key.password ssl.keymanager.algorithm ssl.keystore.certificate.chain ssl.keystore.key
    ssl.keystore.location ssl.keystore.password ssl.keystore.type ssl.protocol ssl.provider
    ssl.secure.random.implementation ssl.trustmanager.algorithm ssl.truststore.certificates
    ssl.truststore.location ssl.truststore.password ssl.truststore.type transaction.timeout.ms
    transaction.two.phase.commit.enable transactional.id value.deserializer value.serializer
    """
)

# Keys of Kafka Connect's worker (DistributedConfig of connect-runtime 4.3, minus the client keys
# above), which MM2 reads at top level and per cluster (``<alias>.offset.storage.replication.factor``).
CONNECT_WORKER_KEYS = _names(
    """
    access.control.allow.methods access.control.allow.origin admin.listeners
    config.storage.replication.factor config.storage.topic connect.protocol
    connector.client.config.override.policy exactly.once.source.support header.converter
    header.converter.plugin.version inter.worker.key.generation.algorithm inter.worker.key.size
    inter.worker.key.ttl.ms inter.worker.signature.algorithm inter.worker.verification.algorithms
    key.converter key.converter.plugin.version listeners offset.flush.interval.ms
    offset.flush.timeout.ms offset.storage.partitions offset.storage.replication.factor
    offset.storage.topic plugin.discovery plugin.path rebalance.timeout.ms response.http.headers.config
    rest.advertised.host.name rest.advertised.listener rest.advertised.port rest.extension.classes
    scheduled.rebalance.max.delay.ms ssl.client.auth status.storage.partitions
    status.storage.replication.factor status.storage.topic task.shutdown.graceful.timeout.ms
    topic.creation.enable topic.tracking.allow.reset topic.tracking.enable value.converter
    value.converter.plugin.version worker.sync.timeout.ms worker.unsync.backoff.ms
    """
)
