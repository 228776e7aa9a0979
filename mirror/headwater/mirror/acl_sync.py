"""Topic ACLs kept in step (MM2's ``sync.topic.acls.enabled``, ``sync.topic.acls.interval.seconds``).

Every interval one process of the flow (the member that emits the checkpoints) reads the source's
topic ACLs (DescribeAcls, resource type Topic, any pattern) and creates in the target what MM2's
``MirrorSourceConnector.syncTopicAcls`` (3.x) creates:

- only bindings on a LITERAL topic name the flow mirrors (PREFIXED bindings are not copied, as in
  MM2; nor is the LITERAL wildcard ``*``: under IdentityReplicationPolicy it would open every topic
  of the target, which MM2 would do -- Headwater does not);
- ALLOW WRITE is skipped (only the mirror writes a copy);
- ALLOW ALL becomes ALLOW READ;
- everything else (DENY of any operation, ALLOW READ, DESCRIBE ...) is copied as it is,
- onto the LITERAL target topic (``dc1.orders`` under DefaultReplicationPolicy).

As in MM2, ACLs are only ever added to the target: one removed at the source stays in the target
until an operator removes it there. What the mirror's principal needs for it: Describe on the
source's Cluster (DescribeAcls) and Alter on the target's Cluster (CreateAcls) -- Alter on the
Cluster lets it create any ACL, which is why Headwater leaves this off by default (MM2: on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from headwater.acls import ANY, PATTERN_CODES, RESOURCE_TYPE_CODES, WILDCARD, Acl, AclFilter, Resource
from headwater.client.acl_admin import Binding, create_acls, describe_acls
from headwater.client.cluster import Cluster
from headwater.service.supervisor import Unit, wait_or_stop

__all__ = ["AclSync", "target_bindings"]

log = logging.getLogger("headwater.mirror")

_ANY_TOPIC_ACL = AclFilter(RESOURCE_TYPE_CODES["Topic"], None, ANY, None, None, ANY, ANY)


def target_bindings(
    source: list[Binding], mirrors_topic: Callable[[str], bool], target_topic: Callable[[str], str]
) -> set[Binding]:
    """The target's bindings for the source's topic ACLs, as MM2 maps them."""
    out: set[Binding] = set()
    for res, acl in source:
        if res.type != "Topic" or res.pattern != "LITERAL" or res.name == WILDCARD or not mirrors_topic(res.name):
            continue
        if acl.permission == "Allow" and acl.operation == "Write":
            continue
        if acl.permission == "Allow" and acl.operation == "All":
            acl = Acl(acl.principal, "Allow", "Read", acl.host)
        out.add((Resource("Topic", target_topic(res.name), "LITERAL"), acl))
    return out


class AclSync:
    """A flow's ACL sync: every ``interval_s``, on the flow's leader, what is missing in the target created."""

    def __init__(
        self,
        *,
        flow: str,
        source: Cluster,
        target: Cluster,
        interval_s: float,
        mirrors_topic: Callable[[str], bool],
        target_topic: Callable[[str], str],
        is_leader: Callable[[], Awaitable[bool]],
    ) -> None:
        self.flow = flow
        self.source = source
        self.target = target
        self.interval_s = interval_s
        self.mirrors_topic = mirrors_topic
        self.target_topic = target_topic
        self.is_leader = is_leader
        self.created = 0

    async def sync_once(self) -> int:
        """Create the target's missing bindings; how many."""
        wanted = target_bindings(
            await describe_acls(self.source, _ANY_TOPIC_ACL), self.mirrors_topic, self.target_topic
        )
        if not wanted:
            return 0
        literal = AclFilter(RESOURCE_TYPE_CODES["Topic"], None, PATTERN_CODES["LITERAL"], None, None, ANY, ANY)
        have = set(await describe_acls(self.target, literal))
        missing = sorted(wanted - have, key=repr)
        await create_acls(self.target, missing)
        for res, acl in missing:
            log.info(
                "%s: topic ACL copied to the target: %s %s %s on %s (host %s)",
                self.flow,
                acl.principal,
                acl.permission,
                acl.operation,
                res.name,
                acl.host,
            )
        self.created += len(missing)
        return len(missing)

    async def run(self, unit: Unit, stop: asyncio.Event) -> None:
        """The supervised loop (a refusal -- CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED -- fails the
        unit: logged at ERROR, counted, retried with backoff, shown by /healthz)."""
        while not stop.is_set():
            unit.progress()
            if await self.is_leader():
                await self.sync_once()
            await wait_or_stop(stop, self.interval_s)
