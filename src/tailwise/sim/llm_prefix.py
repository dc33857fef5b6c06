"""Automatic prefix caching for the paged KV engine (``prefix_caching: true``).

The workload: every prompt starts with one of ``prefix_groups`` shared
prefixes of ``prefix_tokens`` tokens (a system prompt, a few-shot header).
Only whole blocks are shared, as vLLM shares blocks by the hash of their
content: a group's prefix is ``prefix_tokens // kv_block_tokens`` blocks.

:class:`PrefixCache` keeps, per group, the blocks present in the cache, how
many of them hold computed KV, and how many running sequences use them. A
sequence admitted while its group's blocks are computed skips prefilling
them (its prefill is the rest of its prompt); blocks nobody uses stay cached
but may be evicted: least recently used group first, from the end of its
prefix (vLLM's evictor takes the least recently used block, and of equals
the one deeper in its prefix), so what is left of a prefix is still a prefix.
Block counts only: which physical block is which does not matter here.
"""

from __future__ import annotations


class PrefixCache:
    """Per prefix group: blocks present, blocks computed, users, last use."""

    def __init__(self, groups: int, blocks: int) -> None:
        self.blocks = blocks  # a prefix's whole blocks
        self.present = [0] * groups
        self.ready = [0] * groups  # computed blocks, a prefix of the present ones
        self.users = [0] * groups
        self.last = [0] * groups  # when its last user left (a counter), for LRU
        self.evictable = 0  # blocks present in groups nobody uses
        self.tick = 0
        self.hits = 0  # admissions that skipped a computed prefix

    def pinned_if_admitted(self, g: int) -> int:
        """Evictable blocks that admitting a member of ``g`` would take off the market."""
        return self.present[g] if self.users[g] == 0 else 0

    def missing(self, g: int) -> int:
        return self.blocks - self.present[g]

    def pin(self, g: int) -> int:
        """A member of ``g`` is admitted: returns the computed blocks it may skip."""
        if self.users[g] == 0:
            self.evictable -= self.present[g]
        self.users[g] += 1
        self.present[g] = self.blocks
        if self.ready[g]:
            self.hits += 1
        return self.ready[g]

    def unpin(self, g: int) -> None:
        self.users[g] -= 1
        if self.users[g] == 0:
            self.evictable += self.present[g]
            self.tick += 1
            self.last[g] = self.tick

    def computed(self, g: int) -> None:
        """A member's prompt is done: the group's prefix blocks hold its KV."""
        self.ready[g] = self.blocks

    def evict(self, count: int) -> int:
        """Free ``count`` unused cached blocks (or all there are); returns how many."""
        freed = 0
        while freed < count and self.evictable:
            g = min(
                (k for k, n in enumerate(self.present) if n and not self.users[k]),
                key=self.last.__getitem__,
            )
            take = min(count - freed, self.present[g])
            self.present[g] -= take
            self.ready[g] = min(self.ready[g], self.present[g])
            self.evictable -= take
            freed += take
        return freed
