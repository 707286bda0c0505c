"""MirrorMaker 2 compatibility, byte for byte and rule for rule: ``ReplicationPolicy`` naming,
``TopicFilter``/``GroupFilter`` and the cycle rule, the Checkpoint/Heartbeat/OffsetSync records and
Kafka's protocol types they use, the topic ACL sync rules.

Public surface: every module. It is the contract with MM2's own tools, so it imports nothing but the
standard library and ``mirrorflow.errors`` (``make lint`` holds it to that list).
"""
