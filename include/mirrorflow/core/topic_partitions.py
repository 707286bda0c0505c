"""``TP``: a topic and one of its partitions, ``(topic, partition)``, the one name for it across the
package. kafka-python's ``TopicPartition`` appears only where a client call takes one."""

from __future__ import annotations

__all__ = ["TP"]

TP = tuple[str, int]
