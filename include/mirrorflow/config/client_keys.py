"""The key table's client section: every Java client setting a cluster's or a flow's client settings
may hold (``<alias>.``, ``<alias>.<role>.``, top-level security keys, a flow's ``source.cluster.`` and
``target.<role>.``), and what this product does with each, in ``config.keys``' terms (its ``Key``
rows, honoured, no effect or refused); what a client key no row names gets.
"""

from __future__ import annotations

from mirrorflow.config.keys import JAVA_CLASS_NOTE, NO_REST_NOTE, STATE_NOTE, H, Key, N, R

_NO_GROUP = "the copy reads planned offset ranges, without a consumer group"
_EXACTLY_ONCE = (
    "every copy writes in transactions of the flow's transactional id (`mirrorflow.<flow>`), one request "
    "in flight per partition (see `transaction.timeout.ms`)"
)
_AS_BYTES = "records are copied as bytes"
_OPENSSL = "TLS versions and ciphers are OpenSSL's defaults (TLS 1.2 or newer)"
NO_GSSAPI = (
    "GSSAPI (Kerberos) is not supported: the Python clients would each need a keytab and a ticket of "
    "their own on every worker; use OAUTHBEARER, SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"
)
_OAUTH = "OAUTHBEARER (see Secured clusters)"
_VALIDATOR = "the brokers' token validation; the clients here do not check the token they are given"

# Java client settings (at <alias>., <alias>.<role>., top-level security keys, and a flow's
# source.cluster. / target.<role>. etc.). A client key not listed is an UNLISTED_CLIENT_KEY.
CLIENT_KEYS: tuple[Key, ...] = (
    Key("bootstrap.servers", H, "every client of the cluster (required per cluster)"),
    Key("client.id", H, "every client"),
    Key(
        "security.protocol",
        H,
        "every client",
        "PLAINTEXT",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    ),
    Key(
        "sasl.mechanism",
        H,
        "every client: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER` (OIDC client credentials)",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
    ),
    Key(
        "sasl.jaas.config",
        H,
        "every client: the `username` and `password` of the login module; for OAUTHBEARER Kafka's "
        "`OAuthBearerLoginModule` with `clientId`, `clientSecret` and optionally `scope`",
    ),
    Key(
        "sasl.oauthbearer.token.endpoint.url",
        H,
        f"{_OAUTH}: the OIDC server's token endpoint, asked for client-credentials tokens, renewed at 80 % "
        "of their lifetime",
    ),
    Key("sasl.oauthbearer.client.credentials.client.id", H, f"{_OAUTH}: instead of the JAAS `clientId`"),
    Key(
        "sasl.oauthbearer.client.credentials.client.secret",
        H,
        f"{_OAUTH}: instead of the JAAS `clientSecret`",
    ),
    Key("sasl.oauthbearer.scope", H, f"{_OAUTH}: instead of the JAAS `scope`"),
    Key(
        "sasl.login.callback.handler.class",
        H,
        f"{_OAUTH}: Kafka's `OAuthBearerLoginCallbackHandler` "
        f"(any other class is refused: {JAVA_CLASS_NOTE})",
    ),
    Key("sasl.login.connect.timeout.ms", H, f"{_OAUTH}: the token request's connect timeout", kind="pos"),
    Key("sasl.login.read.timeout.ms", H, f"{_OAUTH}: the token request's read timeout", kind="pos"),
    *(
        Key(k, N, f"{_OAUTH}: tokens are renewed at 80 % of their lifetime, a refused request fails the step")
        for k in (
            "sasl.login.refresh.buffer.seconds",
            "sasl.login.refresh.min.period.seconds",
            "sasl.login.refresh.window.factor",
            "sasl.login.refresh.window.jitter",
            "sasl.login.retry.backoff.ms",
            "sasl.login.retry.backoff.max.ms",
        )
    ),
    *(
        Key(k, N, _VALIDATOR)
        for k in (
            "sasl.oauthbearer.clock.skew.seconds",
            "sasl.oauthbearer.expected.audience",
            "sasl.oauthbearer.expected.issuer",
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
            "sasl.oauthbearer.jwks.endpoint.url",
            "sasl.oauthbearer.scope.claim.name",
            "sasl.oauthbearer.sub.claim.name",
        )
    ),
    Key(
        "sasl.oauthbearer.header.urlencode",
        N,
        f"{_OAUTH}: the client id and secret go to the token endpoint in HTTP basic authentication",
    ),
    Key(
        "sasl.oauthbearer.assertion.*",
        R,
        f"{_OAUTH} takes the client-credentials grant only (clientId and clientSecret); remove the key",
    ),
    Key("sasl.oauthbearer.jwt.retriever.class", R, JAVA_CLASS_NOTE),
    Key("sasl.oauthbearer.jwt.validator.class", R, JAVA_CLASS_NOTE),
    Key("sasl.login.class", R, JAVA_CLASS_NOTE),
    Key(
        "ssl.truststore.location",
        H,
        "every client: a PEM file of CA certificates (librdkafka's "
        "`ssl.ca.location`, kafka-python's `ssl_cafile`)",
    ),
    Key(
        "ssl.truststore.type",
        H,
        "`PEM`; JKS and PKCS12 are refused with the keytool command that exports a PEM file",
        "JKS",
    ),
    Key(
        "ssl.endpoint.identification.algorithm",
        H,
        "every client: `https` verifies the broker's host name, empty does not",
        "https",
    ),
    Key(
        "request.timeout.ms",
        H,
        "the control plane's admin calls (also the wait for an unreachable cluster) and the librdkafka "
        "writers",
        "30000",
        "pos",
    ),
    Key(
        "transaction.timeout.ms",
        H,
        "the target's producer: how long a batch run's transaction may stay open (at most the "
        "brokers' `transaction.max.timeout.ms`); its copy stops reading source records at two thirds of "
        "it, commits what it read and leaves the rest to the next run. A DR micro-batch's is the smaller "
        "of it and one minute",
        "900000",
        "pos",
    ),
    *(
        Key(
            k,
            H,
            "the librdkafka writers of heartbeats, offset syncs and checkpoints; the record copy keeps "
            "the source's batches, idempotent with acks=all",
            kind="text" if k in ("acks", "compression.type") else "int",
        )
        for k in (
            "acks",
            "linger.ms",
            "batch.size",
            "compression.type",
            "delivery.timeout.ms",
            "retry.backoff.ms",
        )
    ),
    Key(
        "max.request.size",
        H,
        "the librdkafka writers (their `message.max.bytes`); the record copy sends the source's batches as "
        "they are, each within the remote topic's `max.message.bytes` (synced from the source)",
        "1048576",
        "pos",
    ),
    Key("metadata.max.age.ms", H, "the librdkafka writers", kind="int"),
    Key("socket.connection.setup.timeout.ms", H, "the librdkafka writers", kind="int"),
    Key(
        "ssl.keystore.location",
        H,
        "every client: the client certificate (mutual TLS), a PEM file of the private key and its "
        "certificate chain, or a PKCS12 store; JKS is refused with the keytool command that converts it",
    ),
    Key("ssl.keystore.type", H, "`PEM` or `PKCS12`", "JKS"),
    Key("ssl.keystore.password", H, "a PKCS12 store's password (a PEM keystore has none)"),
    Key(
        "ssl.key.password",
        H,
        "the password of a PEM keystore's private key (a PKCS12 store's key has the store's)",
    ),
    Key(
        "ssl.keystore.key", H, "the client certificate's private key inline, in PEM (ssl.keystore.type = PEM)"
    ),
    Key(
        "ssl.keystore.certificate.chain",
        H,
        "the client certificate's chain inline, in PEM (with ssl.keystore.key)",
    ),
    Key(
        "ssl.truststore.certificates",
        R,
        "write the certificates to a PEM file and point `ssl.truststore.location` at it",
    ),
    Key("sasl.kerberos.*", R, NO_GSSAPI),
    Key("sasl.client.callback.handler.class", R, JAVA_CLASS_NOTE),
    Key("ssl.engine.factory.class", R, JAVA_CLASS_NOTE),
    Key("interceptor.classes", R, JAVA_CLASS_NOTE),
    Key("security.providers", R, JAVA_CLASS_NOTE),
    Key("bootstrap.controllers", R, "the clients reach brokers only; set `bootstrap.servers`"),
    Key("config.providers", R, "config providers are declared at top level only; move the key there"),
    Key("ssl.truststore.password", N, "a PEM truststore has no password"),
    *(
        Key(k, N, _OPENSSL)
        for k in (
            "ssl.protocol",
            "ssl.enabled.protocols",
            "ssl.cipher.suites",
            "ssl.keymanager.algorithm",
            "ssl.trustmanager.algorithm",
            "ssl.secure.random.implementation",
            "ssl.provider",
        )
    ),
    Key(
        "isolation.level",
        N,
        "the copy always reads committed records only: aborted transactions and their markers are not copied",
    ),
    *(
        Key(k, N, _EXACTLY_ONCE)
        for k in (
            "enable.idempotence",
            "transactional.id",
            "transaction.two.phase.commit.enable",
            "max.in.flight.requests.per.connection",
        )
    ),
    *(
        Key(k, N, _AS_BYTES)
        for k in ("key.serializer", "value.serializer", "key.deserializer", "value.deserializer")
    ),
    *(
        Key(k, N, _NO_GROUP)
        for k in (
            "group.id",
            "group.instance.id",
            "group.protocol",
            "group.remote.assignor",
            "auto.offset.reset",
            "enable.auto.commit",
            "auto.commit.interval.ms",
            "partition.assignment.strategy",
            "heartbeat.interval.ms",
            "session.timeout.ms",
            "max.poll.interval.ms",
            "max.poll.records",
            "share.acknowledgement.mode",
            "share.acquire.mode",
        )
    ),
)

# What a key no row names gets: any other Java client setting (java_clients.JAVA_CLIENT_KEYS), and
# Connect's worker settings (java_clients.CONNECT_WORKER_KEYS; those that are connector settings
# too are rows of FLOW_KEYS).
UNLISTED_CLIENT_KEY = Key(
    "", N, "not used: the copy and the control plane fetch and write record batches with their own sizes"
)
WORKER_STORAGE_KEY = Key("", N, STATE_NOTE)
WORKER_KEY = Key("", N, NO_REST_NOTE)
