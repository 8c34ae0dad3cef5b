"""Paged KV block allocator: free list, reference counts and prefix caching over full blocks.

A full block is identified by a chained hash: hash(parent block's hash, this block's tokens), so one
hash names a whole prefix. A block is registered in the cache only after its KV has been computed
(`cache_full_blocks`), so a hit never reads KV that a chunked prefill has not written yet. Freed blocks
that carry a hash stay reusable until a fresh allocation evicts them, least recently freed first.

n > 1 (`fork`): a child shares the parent's blocks that hold prompt tokens [0, L-1) only, where L is the
prompt length; the rest of the prompt (1..block_size tokens) is recomputed into the child's own blocks.
Shared blocks are never written again, so copy-on-write is never needed, and the child gets the logits
of its last prompt position to sample its own first token.

A model whose every layer attends within a sliding window (`kv_window`, Mistral's) never reads a key
older than the window again, so a running sequence hands those blocks back (`release_outside_window`):
its KV memory stays bounded by the window however long it grows.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from inference.core.sequence import Sequence

_NO_HASH = -1


class Block:
    __slots__ = ("block_id", "hash", "ref_count", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash = _NO_HASH
        self.token_ids: tuple[int, ...] = ()  # kept to rule out hash collisions on a hit


def chain_hash(parent: int, token_ids: tuple[int, ...]) -> int:
    # Python's hash of ints and tuples of ints is not salted, so this is stable across runs.
    return hash((parent, token_ids))


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_prefix_caching: bool = True,
        kv_window: int | None = None,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.kv_window = kv_window
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))  # ref 0, no hash
        self._evictable: OrderedDict[int, None] = OrderedDict()  # ref 0, hashed; oldest first
        self._by_hash: dict[int, int] = {}
        self.prefix_cache_queries = 0  # tokens looked up
        self.prefix_cache_hits = 0  # tokens found

    # ---- accounting -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- prefix cache -----------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks for the longest computed prefix of seq, leaving at least one token to compute."""
        if not self.enable_prefix_caching or seq.params.prompt_logprobs is not None:
            return []  # prompt logprobs need logits at every prompt position
        matched: list[int] = []
        parent = _NO_HASH
        for i in range((len(seq.token_ids) - 1) // self.block_size):
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            parent = chain_hash(parent, tokens)
            block_id = self._by_hash.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            matched.append(block_id)
        return matched

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register seq's full blocks whose KV is now computed, so later prompts can reuse them."""
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        parent = seq.block_hashes[-1] if seq.block_hashes else _NO_HASH
        for i in range(len(seq.block_hashes), num_full):
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            parent = chain_hash(parent, tokens)
            seq.block_hashes.append(parent)
            block = self.blocks[seq.block_table[i]]
            if self.enable_prefix_caching and parent not in self._by_hash and block.hash == _NO_HASH:
                block.hash, block.token_ids = parent, tokens
                self._by_hash[parent] = block.block_id

    # ---- allocation -------------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, cached: list[int], num_tokens: int) -> bool:
        """Whether seq (no blocks, or forked ones) can get `cached` plus fresh blocks for num_tokens."""
        held = len(seq.block_table) + len(cached)
        revived = sum(1 for b in cached if self.blocks[b].ref_count == 0)  # these leave the free pool too
        return self.blocks_for(num_tokens) - held + revived <= self.num_free_blocks

    def allocate(self, seq: Sequence, cached: list[int], num_tokens: int) -> None:
        """Admit seq: take the cached prefix blocks, then fresh blocks up to num_tokens positions."""
        if cached and seq.block_table:
            raise ValueError(f"{seq!r} already holds blocks; prefix hits apply to a fresh sequence only")
        if not self.can_allocate(seq, cached, num_tokens):
            raise ValueError(f"not enough free KV blocks for {seq!r}")
        if not seq.block_table:
            self.prefix_cache_queries += len(seq.token_ids)
            self.prefix_cache_hits += len(cached) * self.block_size
            for block_id in cached:
                self._take(block_id)
            seq.block_table = list(cached)
            seq.block_hashes = [self.blocks[b].hash for b in cached]
            seq.num_computed_tokens = len(cached) * self.block_size
        self._grow(seq, num_tokens)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        need = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        return need <= self.num_free_blocks

    def append(self, seq: Sequence, num_new_tokens: int) -> None:
        """Make room for num_new_tokens more computed positions of a running sequence."""
        if not self.can_append(seq, num_new_tokens):
            raise ValueError(f"not enough free KV blocks for {seq!r}")
        self._grow(seq, seq.num_computed_tokens + num_new_tokens)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Share parent's prompt blocks that are full before the last prompt token (see module doc)."""
        if child.block_table:
            raise ValueError(f"{child!r} already holds blocks")
        num_shared = min((parent.num_prompt_tokens - 1) // self.block_size, len(parent.block_table))
        num_shared = min(num_shared, parent.num_computed_tokens // self.block_size)
        released = parent.num_released_blocks
        if released > self._outside_window(num_shared * self.block_size):
            num_shared = released = 0  # the child's first rows would see keys the parent has let go
        for block_id in parent.block_table[released:num_shared]:
            self._take(block_id)
        child.block_table = parent.block_table[:num_shared]
        child.block_hashes = parent.block_hashes[:num_shared]
        child.num_released_blocks = released
        child.num_computed_tokens = num_shared * self.block_size

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks; hashed ones stay reusable. Tail first, so it is evicted first."""
        for block_id in reversed(seq.block_table[seq.num_released_blocks :]):
            self._release(block_id, seq)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_released_blocks = 0
        seq.num_computed_tokens = 0

    def release_outside_window(self, seq: Sequence) -> None:
        """Hand back seq's leading blocks that no row from its next position on can see (kv_window)."""
        gone = min(self._outside_window(seq.num_computed_tokens), len(seq.block_table))
        for block_id in seq.block_table[seq.num_released_blocks : gone]:
            self._release(block_id, seq)  # full and computed, so hashed: still a prefix-cache hit for now
        seq.num_released_blocks = max(seq.num_released_blocks, gone)

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Free seq's blocks past the first num_tokens positions (ones reserved for rejected drafts).

        Never below its computed tokens: those blocks hold KV that is final, and may be hashed.
        """
        keep = self.blocks_for(max(num_tokens, seq.num_computed_tokens))
        while len(seq.block_table) > keep:
            self._release(seq.block_table.pop(), seq)

    def reset_prefix_cache(self) -> None:
        for block_id in list(self._evictable):
            self._forget(self.blocks[block_id])
            self._free.append(block_id)
        self._evictable.clear()

    # ---- internals --------------------------------------------------------------------------------
    def _outside_window(self, position: int) -> int:
        """How many leading blocks hold only keys that a row at `position` or later never sees."""
        if self.kv_window is None:
            return 0
        # A row at p sees keys p - window < k <= p (transformers' window).
        return max(0, position - self.kv_window + 1) // self.block_size

    def _grow(self, seq: Sequence, num_tokens: int) -> None:
        while len(seq.block_table) < self.blocks_for(num_tokens):
            seq.block_table.append(self._fresh())

    def _release(self, block_id: int, seq: Sequence) -> None:
        block = self.blocks[block_id]
        if block.ref_count <= 0:
            raise ValueError(f"double free of block {block_id} by {seq!r}")
        block.ref_count -= 1
        if block.ref_count == 0:
            if block.hash == _NO_HASH:
                self._free.append(block_id)
            else:
                self._evictable[block_id] = None

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self._evictable.pop(block_id, None)
        block.ref_count += 1

    def _fresh(self) -> int:
        if self._free:
            block_id = self._free.popleft()
        else:
            block_id, _ = self._evictable.popitem(last=False)
            self._forget(self.blocks[block_id])
        self.blocks[block_id].ref_count = 1
        return block_id

    def _forget(self, block: Block) -> None:
        if self._by_hash.get(block.hash) == block.block_id:
            del self._by_hash[block.hash]
        block.hash, block.token_ids = _NO_HASH, ()
