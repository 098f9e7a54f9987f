"""The running decodes of one replica, kept relative to one shared counter, so that a scheduler step costs O(1)
in their number (see :mod:`msopt.sim.engine`)."""

from __future__ import annotations

import heapq
from collections.abc import Set

_NONE: frozenset[int] = frozenset()


class Decodes:
    """The running decodes of one replica, which sample their tokens together.

    Decode ``i`` has ``c0[i] + g`` tokens in the KV cache and ``o0[i] - g`` left to sample, ``g``
    counting the tokens every decode sampled, and holds ``max(bj[i], ceil(ctx / bs))`` KV blocks
    (``bj[i]``: its blocks when its prompt was done). ``need[x]`` holds the decodes whose last
    block is full once ``g == x``: each needs a new block to sample its next token.
    """

    def __init__(self, n: int, bs: int) -> None:
        self.bs = bs
        self.g = 0
        self.members: set[int] = set()
        self.c0 = [0] * n
        self.o0 = [0] * n
        self.bj = [0] * n
        self.base = 0  # the sum of c0 over the members
        self.need: dict[int, set[int]] = {}
        self.ends: list[tuple[int, int]] = []  # (o0, request): a heap; stale entries are skipped

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, i: int) -> bool:
        return i in self.members

    def ctx_sum(self) -> int:
        """Tokens in the KV cache over all decodes."""
        return self.base + len(self.members) * self.g

    def ctx(self, i: int) -> int:
        return self.c0[i] + self.g

    def blocks(self, i: int) -> int:
        b, bj = -(-(self.c0[i] + self.g) // self.bs), self.bj[i]
        return b if b > bj else bj

    def _next_need(self, i: int) -> int:
        return self.g + self.blocks(i) * self.bs - self.ctx(i)

    def _file(self, x: int, i: int) -> None:
        s = self.need.get(x)
        if s is None:
            self.need[x] = {i}
        else:
            s.add(i)

    def _unfile(self, x: int, i: int) -> None:
        s = self.need[x]
        s.discard(i)
        if not s:
            del self.need[x]

    def _merge(self, x: int, s: set[int]) -> None:
        t = self.need.get(x)
        if t is None:
            self.need[x] = s
        else:
            t |= s

    def needy(self) -> Set[int]:
        """The decodes that need a new KV block for their next token."""
        return self.need.get(self.g) or _NONE

    def add(self, i: int, ctx: int, out_left: int, blocks: int) -> None:
        """Request ``i`` starts decoding."""
        g = self.g
        self.c0[i] = c0 = ctx - g
        self.o0[i] = o0 = out_left + g
        self.bj[i] = blocks
        self.base += c0
        self.members.add(i)
        heapq.heappush(self.ends, (o0, i))
        self._file(g + blocks * self.bs - ctx, i)

    def remove(self, i: int) -> tuple[int, int, int]:
        """Request ``i`` stops decoding; returns its (context, tokens left, blocks)."""
        ctx, blocks = self.ctx(i), self.blocks(i)
        self._unfile(self.g + blocks * self.bs - ctx, i)
        self.members.discard(i)
        self.base -= self.c0[i]
        return ctx, self.o0[i] - self.g, blocks

    def min_left(self) -> int:
        """The fewest tokens any decode has left to sample (there is one)."""
        ends, o0, members = self.ends, self.o0, self.members
        while True:
            o, i = ends[0]
            if i in members and o0[i] == o:
                return o - self.g
            heapq.heappop(ends)

    def pop_finished(self) -> list[tuple[int, int]]:
        """Remove the decodes with nothing left to sample; returns (request, blocks) of each."""
        ends, o0, members, out = self.ends, self.o0, self.members, []
        while ends and ends[0][0] <= self.g:
            o, i = heapq.heappop(ends)
            if i in members and o0[i] == o:
                out.append((i, self.remove(i)[2]))
        return out

    def extra(self, k: int) -> int:
        """KV blocks the decodes take to sample ``k`` tokens each."""
        end, bs = self.g + k, self.bs
        return sum(len(s) * (1 + (end - 1 - x) // bs) for x, s in self.need.items() if x < end)

    def advance(self, k: int, held: list[int]) -> int:
        """Every decode but ``held`` (only with ``k == 1``) samples ``k`` tokens; returns the KV
        blocks they took."""
        bs, need, g = self.bs, self.need, self.g
        if k == 1 and not held:  # the common step
            self.g = g + 1
            s = need.pop(g, None)
            if s is None:
                return 0
            self._merge(g + bs, s)
            return len(s)
        moved = []
        for i in held:  # its context stays: one token less relative to the counter
            x = self._next_need(i)
            self._unfile(x, i)
            moved.append((x + 1, i))
            self.c0[i] -= 1
            self.o0[i] += 1
            heapq.heappush(self.ends, (self.o0[i], i))
        self.base -= len(held)
        end = g + k
        taken = 0
        if k == 1:
            s = need.pop(g, None)
            if s:
                taken = len(s)
                self._merge(g + bs, s)
        else:
            for x in [x for x in need if x < end]:
                s = need.pop(x)
                m = 1 + (end - 1 - x) // bs
                taken += len(s) * m
                self._merge(x + m * bs, s)
        self.g = end
        for x, i in moved:
            self._file(x, i)
        return taken
