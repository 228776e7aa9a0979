"""Load-aware placement: which mirror process copies which source partition, by bytes, not by count.

Every member measures the bytes its copiers deliver to the target, per partition, as a moving
rate over ``placement.rebalance.interval.seconds`` (:class:`ByteRates`), and publishes it in the
source's ZooKeeper (``/consumers/<group>/mirror-rates/<member>``, format in
:mod:`headwater.mirror.group`). The flow's leader (the member with the smallest consumer id, as
for checkpoints and the syncs) evaluates the placement every interval with :func:`place` and
writes the result (``/consumers/<group>/mirror-placement``); every member follows it.

The placement is written as *overrides* of the rendezvous owner (:func:`headwater.mirror.group.owner_of`):
a partition not listed, or listed with a member that has gone, goes where rendezvous hashing puts
it. So with no rates yet (start-up, or rates all zero) nothing is overridden and the placement is
the count-based one of before (the leader waits, up to three intervals, until every partition has a
rate: one still being claimed, counted as 0, could be moved off again at once); a member joining or leaving still moves only the partitions it
gains or loses; and a partition that does not move keeps its copier (no stop-the-world).

:func:`balance` starts from the current owners and moves partitions, one at a time, off the
member most over the bound (``placement.load.tolerance`` times the mean load):

- a member never gives away its largest partition (moving it moves the problem);
- a member whose largest partition alone reaches the bound can never get within it: it gives
  away every other partition (a hot partition gets a process of its own: the others on a
  saturated process would lag behind it);
- otherwise it gives the smallest partition that takes it within the bound in one move, or,
  when none does, the largest one the receiver can take;
- the receiver is the least loaded member (then the one with fewest partitions, then by id);
  it must stay within the bound, or at least end below the donor's load;
- a partition moves at most once per round, and rounds repeat until one moves nothing (so an
  evaluation ends, and the next one with the same rates moves nothing).

Greedy, so not the fewest moves for every input (that is bin packing), but the fewest in the
simple cases: none when every member is within the bound, one when one partition fixes the one
member over it, and only the hot member's other partitions when one partition is hot
(tests/mirror/test_placement.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping

from headwater.mirror.group import TopicPartition, owner_of

#: placement.load.tolerance's default: a member may carry 25 % more than the mean load. Rates over a
#: window are noisy and every move costs the partition a hand-over, so a bound at the mean itself
#: would move partitions back and forth on noise (docs/mirror.md, Load-aware placement)
DEFAULT_TOLERANCE = 1.25
#: placement.rebalance.interval.seconds' default
DEFAULT_INTERVAL_S = 60.0
#: rounds of moves in one evaluation, at most (see :func:`balance`)
MAX_ROUNDS = 10


def effective_owners(
    partitions: Iterable[TopicPartition], members: Iterable[str], overrides: Mapping[TopicPartition, str]
) -> dict[TopicPartition, str]:
    """Every partition's owner: its override when that member is live, else its rendezvous owner."""
    ms = sorted(set(members))
    live = set(ms)
    out: dict[TopicPartition, str] = {}
    for tp in partitions:
        chosen = overrides.get(tp)
        owner = chosen if chosen in live else owner_of(tp, ms)
        if owner is not None:
            out[tp] = owner
    return out


def owned(
    partitions: Iterable[TopicPartition], members: Iterable[str], overrides: Mapping[TopicPartition, str], me: str
) -> set[TopicPartition]:
    """The partitions ``me`` owns (:func:`headwater.mirror.group.assign` when nothing is overridden)."""
    return {tp for tp, m in effective_owners(partitions, members, overrides).items() if m == me}


def balance(
    owners: Mapping[TopicPartition, str],
    members: Iterable[str],
    rates: Mapping[TopicPartition, float],
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[TopicPartition, str]:
    """New owners from the current ``owners`` (every one in ``members``) and each partition's byte
    rate (missing: 0): see the module's docstring. Deterministic; the input is not changed.

    Rounds of :func:`_round` until one moves nothing (at most :data:`MAX_ROUNDS`): a round moves a
    partition at most once, and one in sixteen random placements needs a second round (at most four
    more in 20,000 tried). Done here, the next evaluation with the same rates moves nothing, rather
    than handing partitions over again an interval later."""
    ms = sorted(set(members))
    current = dict(owners)
    for _ in range(MAX_ROUNDS):
        new = _round(current, ms, rates, tolerance)
        if new == current:
            break
        current = new
    return current


def _round(
    owners: Mapping[TopicPartition, str], ms: list[str], rates: Mapping[TopicPartition, float], tolerance: float
) -> dict[TopicPartition, str]:
    new = dict(owners)
    if len(ms) < 2:
        return new
    rate = {tp: max(0.0, float(rates.get(tp, 0.0))) for tp in new}
    total = sum(rate.values())
    if total <= 0:
        return new  # no rates: the count-based placement stands
    bound = tolerance * total / len(ms)
    held: dict[str, set[TopicPartition]] = {m: set() for m in ms}
    for tp, m in new.items():
        held[m].add(tp)
    load = {m: sum(rate[tp] for tp in held[m]) for m in ms}
    moved: set[TopicPartition] = set()

    def size(tp: TopicPartition) -> tuple[float, TopicPartition]:
        return rate[tp], tp

    def pick(donor: str) -> tuple[TopicPartition, str] | None:
        top = max(held[donor], key=size)
        candidates = sorted((tp for tp in held[donor] if tp not in moved and tp != top), key=size)
        if not candidates:
            return None
        to = min((m for m in ms if m != donor), key=lambda m: (load[m], len(held[m]), m))
        fitting = [tp for tp in candidates if load[to] + rate[tp] <= bound]
        if rate[top] >= bound:  # pinned: everything else goes, largest first
            choice = fitting[-1] if fitting else None
        else:
            excess = load[donor] - bound
            enough = [tp for tp in fitting if rate[tp] >= excess and rate[tp] > 0]
            choice = enough[0] if enough else (fitting[-1] if fitting and rate[fitting[-1]] > 0 else None)
        if choice is None:  # the receiver cannot stay within the bound: a move must at least lower the peak
            better = [tp for tp in candidates if load[to] + rate[tp] < load[donor]]
            if rate[top] < bound:
                better = [tp for tp in better if rate[tp] > 0]
            choice = better[-1] if better else None
        return None if choice is None else (choice, to)

    while True:
        donors = sorted((m for m in ms if load[m] > bound and len(held[m]) > 1), key=lambda m: (-load[m], m))
        for donor in donors:
            move = pick(donor)
            if move is not None:
                tp, to = move
                held[donor].discard(tp)
                held[to].add(tp)
                load[donor] -= rate[tp]
                load[to] += rate[tp]
                new[tp] = to
                moved.add(tp)
                break
        else:
            return new


def place(
    partitions: Iterable[TopicPartition],
    members: Iterable[str],
    overrides: Mapping[TopicPartition, str],
    rates: Mapping[TopicPartition, float],
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[TopicPartition, str]:
    """The overrides to publish: :func:`balance` of the current placement, as the partitions whose
    owner is not their rendezvous owner."""
    ms = sorted(set(members))
    tps = sorted(set(partitions))
    balanced = balance(effective_owners(tps, ms, overrides), ms, rates, tolerance)
    return {tp: m for tp, m in sorted(balanced.items()) if m != owner_of(tp, ms)}


class ByteRates:
    """Moving byte rates over ``window_s`` from monotonically growing per-partition byte counters
    (the copiers' own count of what the target acknowledged)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, dict[TopicPartition, int]]] = deque()

    def sample(self, counters: Mapping[TopicPartition, int], now: float | None = None) -> dict[TopicPartition, float]:
        """Record the counters of the partitions owned now; the rate of each one that was owned at
        every sample since an earlier one, over up to the last ``window_s`` (bytes per second): a
        partition just taken over has no rate until the next sample."""
        now = time.monotonic() if now is None else now
        current = dict(counters)
        while len(self._samples) > 1 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        rates: dict[TopicPartition, float] = {}
        for tp, count in current.items():
            since: tuple[float, int] | None = None
            for t, old in reversed(self._samples):  # newest first, while it was owned all along
                before = old.get(tp)
                if before is None or before > count:
                    break
                since, count = (t, before), before
            if since is not None and now > since[0]:
                rates[tp] = (current[tp] - since[1]) / (now - since[0])
        self._samples.append((now, current))
        return rates
