"""The tuning page's words: each engine setting's label and what it does (TuningForm shows them)."""

from __future__ import annotations

TUNING_HELP = {
    "max_num_seqs": "Most sequences in one batch; more raises throughput and KV use.",
    "max_num_batched_tokens": "Token budget of one step; bounds prefill chunk size and step latency.",
    "kv_cache_memory_bytes": "Bytes for the paged KV cache (empty: the engine's default).",
    "block_size": "Tokens per KV block; a power of two, 16 suits most models.",
    "enable_chunked_prefill": "Split long prompts across steps so decodes keep flowing.",
    "enable_prefix_caching": "Reuse KV blocks of shared prompt prefixes (system prompts, chats).",
    "attention_backend": "auto: Triton on CUDA (flash-attn when installed and block_size is a multiple of "
    "256), torch SDPA on CPU; flash_attn needs flash-attn installed.",
    "enforce_eager": "CUDA only: turn decode CUDA graphs off (slower; for debugging).",
    "kv_cache_dtype": "CPU: what the KV cache stores keys and values in; float16 or bfloat16 halve an fp32 "
    "model's cache. auto: the compute dtype, but float16 where dtype auto chose float32.",
    "default_temperature": "Temperature when a request omits it (0 = greedy).",
    "default_top_p": "top_p when a request omits it.",
    "default_max_tokens": "Reply length cap when a request omits max_tokens.",
    "drain_timeout_seconds": "How long running requests may finish before a stop, restart or unload aborts "
    "them (empty: MOONCAKE_DRAIN_TIMEOUT or server.drain_timeout).",
    "memory_budget_bytes": "Memory all loaded models may hold (empty: MOONCAKE_MEMORY_BUDGET_BYTES).",
    "evict_lru": "When a load exceeds the budget: unload the least recently used model instead of refusing.",
    "log_prompts": "Store prompt text in the request log (off keeps users' prompts out of the database).",
}


TUNING_LABELS = {
    "max_num_seqs": "Max sequences per batch",
    "max_num_batched_tokens": "Max batched tokens per step",
    "kv_cache_memory_bytes": "KV cache memory (bytes)",
    "block_size": "KV block size (tokens)",
    "enable_chunked_prefill": "Chunked prefill",
    "enable_prefix_caching": "Prefix caching",
    "attention_backend": "Attention backend",
    "enforce_eager": "Eager decode (no CUDA graphs)",
    "kv_cache_dtype": "KV cache dtype",
    "default_temperature": "Default temperature",
    "default_top_p": "Default top_p",
    "default_max_tokens": "Default max_tokens",
    "drain_timeout_seconds": "Drain timeout (s)",
    "memory_budget_bytes": "Memory budget (bytes)",
    "evict_lru": "Evict least recently used",
    "log_prompts": "Log prompt text",
}
