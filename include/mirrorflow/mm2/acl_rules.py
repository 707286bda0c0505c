"""Topic ACL sync with MirrorMaker 2's rules (``sync.topic.acls.enabled``, default true).

From the source: LITERAL topic ACLs of topics the flow mirrors. ALLOW WRITE is dropped (only the
mirror writes to remote topics); ALLOW ALL becomes ALLOW READ; everything else, DENY included, is
copied with the topic renamed to its remote name. Additive only: ACLs on the target are never
removed. A source without an authorizer has nothing to sync.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True, order=True)
class TopicAcl:
    """One LITERAL topic ACL binding."""

    topic: str
    principal: str
    host: str
    operation: str  # Kafka's AclOperation name: READ, WRITE, ALL, DESCRIBE...
    permission: str  # ALLOW or DENY


def target_acls(source_acls: Iterable[TopicAcl], remote_names: Mapping[str, str]) -> list[TopicAcl]:
    """The ACLs to create on the target for ``remote_names`` (source topic -> remote topic)."""
    out = set()
    for acl in source_acls:
        if acl.topic not in remote_names:
            continue
        if acl.permission == "ALLOW" and acl.operation == "WRITE":
            continue
        operation = "READ" if acl.permission == "ALLOW" and acl.operation == "ALL" else acl.operation
        out.add(replace(acl, topic=remote_names[acl.topic], operation=operation))
    return sorted(out)


def missing_acls(wanted: Iterable[TopicAcl], existing: Iterable[TopicAcl]) -> list[TopicAcl]:
    have = set(existing)
    return [a for a in wanted if a not in have]
