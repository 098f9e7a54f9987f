"""The simulator's prefix cache: prompt blocks kept in the free KV blocks of one replica, as vLLM's block-level
automatic prefix caching keeps them (or SGLang's radix tree, to the token). :class:`~msopt.sim.engine.ReplicaScheduler`
asks it at admission and tells it when a prompt is done and when a request lets its blocks go."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Block-level prefix caching (vLLM's): prompt blocks keyed by their id (a prefix hash).

    A block a running request holds is pinned; once no request holds it, it stays cached in the
    free KV blocks until they are needed: the least recently used unpinned block is evicted first
    (vllm 0.32.0 v1/core/block_pool.py, the free block queue in LRU order). A prompt's hit is its
    leading run of cached blocks, capped at the prompt less one token (the last is computed to
    sample from) and aligned to the engine's KV block (v1/core/kv_cache_manager.py:290-298). A
    request holds the KV of its hit like any other (shared blocks are counted for each holder).

    ``partial``: the cache keeps each prompt's tokens to the token (SGLang's radix tree,
    :attr:`msopt.sim.personality.Personality.prefix_cache_partial`): a trace block is cached as far
    as the longest prompt that held it filled it, and a match runs on through its cached blocks,
    ending after one cached only in part. Without it a trace block a prompt held at all counts whole.
    """

    def __init__(self, prefixes: Sequence[tuple[int, ...]], block: int, kv_block: int,
                 partial: bool = False) -> None:
        self.prefixes = prefixes
        self.block = block
        self.kv_block = kv_block
        self.partial = partial
        self.filled: dict[int, int] = {}  # partial: cached block id -> its tokens cached
        self.prompt: dict[int, int] = {}  # partial: request -> its prompt tokens
        self.refs: dict[int, int] = {}  # cached block id -> requests holding it
        self.idle: OrderedDict[int, None] = OrderedDict()  # unpinned cached blocks, least recent first
        self.held: dict[int, tuple[int, ...]] = {}  # request -> the block ids it pins
        self.hit_tokens = 0
        self.query_tokens = 0

    def hit(self, i: int, prompt: int, free_blocks: int) -> tuple[int, int]:
        """(cached prompt tokens of request ``i``, blocks matched), after evicting what ``free_blocks``
        KV blocks cannot keep."""
        keep = free_blocks * self.kv_block // self.block
        idle = self.idle
        while len(idle) > keep:
            h = idle.popitem(last=False)[0]
            del self.refs[h]
            self.filled.pop(h, None)
        k = 0
        refs = self.refs
        if self.partial:
            tokens = 0
            for h in self.prefixes[i]:
                if h not in refs:
                    break
                k += 1
                tokens += self.filled[h]
                if self.filled[h] < self.block:
                    break
            tokens = min(tokens, prompt - 1)
        else:
            for h in self.prefixes[i]:
                if h not in refs:
                    break
                k += 1
            tokens = min(k * self.block, prompt - 1)
        return max(0, tokens - tokens % self.kv_block), k

    def admit(self, i: int, prompt: int, tokens: int, k: int) -> None:
        """Request ``i`` is admitted with ``tokens`` cached: it pins its ``k`` matched blocks."""
        self.query_tokens += prompt
        self.hit_tokens += tokens
        if self.partial:
            self.prompt[i] = prompt
        self._pin(i, self.prefixes[i][:k])

    def prompt_done(self, i: int) -> None:
        """Request ``i``'s prompt is in the KV cache: its blocks are cached (and pinned)."""
        have = len(self.held.get(i, ()))
        self._pin(i, self.prefixes[i][have:])
        if self.partial:
            prompt, block, filled = self.prompt.get(i, 0), self.block, self.filled
            for j, h in enumerate(self.prefixes[i]):
                filled[h] = max(filled.get(h, 0), min(block, prompt - j * block))

    def release(self, i: int) -> None:
        """Request ``i`` finished or was preempted: its blocks stay cached, unpinned."""
        for h in self.held.pop(i, ()):
            n = self.refs[h] - 1
            self.refs[h] = n
            if n == 0:
                self.idle[h] = None

    def _pin(self, i: int, blocks: tuple[int, ...]) -> None:
        refs, idle = self.refs, self.idle
        for h in blocks:
            n = refs.get(h, 0)
            if n == 0 and h in idle:
                del idle[h]
            refs[h] = n + 1
        self.held[i] = self.held.get(i, ()) + blocks
