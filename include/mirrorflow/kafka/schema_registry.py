"""A flow's schema registries, through Confluent's own client (confluent-kafka's
``SchemaRegistryClient``): the source's subjects and versions read, and the subjects holding a schema
id; versions registered on the target.

Errors are classified: a registry that cannot be reached, or answers 5xx, is a ``TransientError``
(Airflow retries the task); a refusal (401/403, an incompatible or invalid schema) is a
``ConfigError`` naming the registry's URL, the subject and what to do. Neither ever holds the
registry's credentials.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

import httpx

# Confluent's client imports Authlib's httpx integration, which Authlib now deprecates: a warning
# about a module this product never uses, printed in every task log.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="The httpx module is deprecated")
    from confluent_kafka.schema_registry import (
        RegisteredSchema,
        Schema,
        SchemaReference,
        SchemaRegistryClient,
    )
    from confluent_kafka.schema_registry.error import SchemaRegistryError

from mirrorflow.config.schemas import RegistryEndpoint
from mirrorflow.core.schema_sync import Reference, SubjectVersion
from mirrorflow.errors import ConfigError, TargetStateError, TransientError

T = TypeVar("T")
# Seconds a registry may take to answer one request: one that never answers is an unreachable one.
TIMEOUT_S = 30
# Confluent's error codes: a subject, version or schema the registry does not hold.
_NOT_FOUND = 404


class Registry:
    """One registry of a flow (``side``: ``source`` or ``target``, for messages)."""

    def __init__(self, endpoint: RegistryEndpoint, side: str) -> None:
        self.url, self.side = endpoint.url, side
        self._client = SchemaRegistryClient({**dict(endpoint.client), "timeout": TIMEOUT_S})

    def subjects(self) -> set[str]:
        return set(self._call("list its subjects", self._client.get_subjects))

    def versions(self, subject: str) -> list[int]:
        return sorted(
            self._call(f"list subject {subject}'s versions", lambda: self._client.get_versions(subject))
        )

    def version(self, subject: str, version: int) -> SubjectVersion:
        got = self._call(
            f"read subject {subject} version {version}", lambda: self._client.get_version(subject, version)
        )
        schema = got.schema
        return SubjectVersion(
            subject,
            version,
            int(got.schema_id or 0),
            schema.schema_type or "AVRO",
            schema.schema_str or "",
            tuple(
                Reference(r.name or "", r.subject or "", int(r.version or 0)) for r in schema.references or ()
            ),
        )

    def holders(self, schema_id: int) -> list[str]:
        """The subjects holding schema id ``schema_id``, sorted (none: the registry holds no such id)."""

        def look() -> list[str]:
            try:
                return sorted({v.subject or "" for v in self._client.get_schema_versions(schema_id)})
            except SchemaRegistryError as error:
                if error.http_status_code == _NOT_FOUND:
                    return []
                raise

        return self._call(f"find the subjects holding schema id {schema_id}", look)

    def register(
        self,
        subject: str,
        source: SubjectVersion,
        references: tuple[Reference, ...],
        *,
        only_look: bool = False,
    ) -> tuple[int, int]:
        """Register ``source``'s schema under ``subject`` with ``references`` (already this registry's
        subject versions); its id and version here. A schema the subject already holds keeps its
        id and version: registering again changes nothing. ``only_look``: find it, registering
        nothing; a subject that lacks it is a ``TargetStateError``."""
        schema = Schema(
            source.schema,
            source.schema_type,
            [SchemaReference(r.name, r.subject, r.version) for r in references],
        )
        what = f"register {source.subject} version {source.version} as subject {subject}"
        if not only_look:
            got = self._call(what, lambda: self._client.register_schema_full_response(subject, schema))
            if got.version is not None:  # some registries answer the id only
                return int(got.schema_id or 0), int(got.version)

        def look() -> RegisteredSchema:
            try:
                return self._client.lookup_schema(subject, schema)
            except SchemaRegistryError as error:
                if only_look and error.http_status_code == _NOT_FOUND:
                    raise TargetStateError(
                        f"the {self.side} schema registry {self.url} lacks {source.subject} version "
                        f"{source.version} under subject {subject}: the records that use it cannot decode "
                        "there; run the flow (its plan syncs the schemas), then verify again"
                    ) from None
                raise

        got = self._call(f"find {source.subject} version {source.version} under subject {subject}", look)
        return int(got.schema_id or 0), int(got.version or 0)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except SchemaRegistryError as error:
            status = error.http_status_code
            if status >= 500 or status < 0:
                raise TransientError(
                    f"the {self.side} schema registry {self.url} failed to {what}: {error}"
                ) from None
            raise ConfigError(
                f"the {self.side} schema registry {self.url} refused to {what}: {error}; "
                + _remedy(status, self.side)
            ) from None
        except httpx.TransportError as error:
            raise TransientError(
                f"the {self.side} schema registry {self.url} is unreachable to {what}: {error}"
            ) from None


def _remedy(status: int, side: str) -> str:
    if status in (401, 403):
        return f"check mirrorflow.schema.registry.{side}.basic.auth.user.info and the user's grants"
    if status == 409:
        return (
            "the target subject's compatibility rule refuses a version the source accepted: give the "
            "target subject the source's compatibility (or NONE), then run the flow again"
        )
    if status == _NOT_FOUND:
        return "the subject or version was deleted meanwhile: run the flow again"
    return "check the schema and the registry's settings"
