"""Shared by the handlers of the controller's requests: flattening partition states.

LeaderAndIsr v0-1 and UpdateMetadata v0-4 list partition states ungrouped (each naming its
topic); later versions group them by topic. Handlers work on the flat form.
"""

from __future__ import annotations

from headwater.protocol.schema import Message


def flat_partition_states(request: Message) -> list[Message]:
    out: list[Message] = list(request.get("ungrouped_partition_states") or [])
    for t in request.get("topic_states") or []:
        for p in t["partition_states"]:
            out.append({**p, "topic_name": t["topic_name"]})
    return out
