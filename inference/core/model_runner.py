"""Runs one ragged step of the model over the paged KV cache; sizes that cache at start-up.

Over 300 lines: its three forward paths (CUDA graphs, the CPU's native layer stack, the modules) share one
host batch, one input hand-over for async scheduling and one logits selection.
"""

from __future__ import annotations

import logging
import time
from typing import cast

import numpy as np
import torch

from inference.config import EngineConfig
from inference.config_groups import check_memory_fraction, check_positive
from inference.core.cuda_graphs import DecodeGraphs, GraphableBackend
from inference.core.model_io import InFlightIds, ScheduledChunk, StepLogits
from inference.core.step_inputs import HostBatch, host_batch
from inference.device import cpu_thread_count
from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.layers.attention import BatchLayout, select_backend
from inference.models.layers.attention.kv_cache import allocate_kv_cache
from inference.models.layers.kv_budget import (
    KVBudget,
    cpu_kv_budget,
    max_model_len_error,
    mib,
    resolve_kv_dtype,
)
from inference.models.loader.load import LoadedModel
from inference.models.quantization.rows import NativeDecode, decoding_rows_fused, fused_decode, module_rows

logger = logging.getLogger(__name__)


class ModelRunner:
    @classmethod
    def from_config(cls, loaded: LoadedModel, config: EngineConfig) -> ModelRunner:
        return cls(
            loaded,
            block_size=config.block_size,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=config.max_model_len,
            kv_cache_memory_bytes=config.kv_cache_memory_bytes,
            kv_cache_dtype=config.kv_cache_dtype,
            dtype_setting=config.dtype,
            gpu_memory_utilization=config.gpu_memory_utilization,
            attention_backend=config.attention_backend,
            enforce_eager=config.enforce_eager,
            cpu_threads=config.cpu_threads,
        )

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int | None,
        kv_cache_memory_bytes: int | None,
        gpu_memory_utilization: float,
        kv_cache_dtype: str = "auto",
        # The dtype as configured ("auto" on a CPU that chose fp32 keeps an fp16 cache); None, as tests and
        # benches build a runner: the loaded model's dtype, as if set explicitly.
        dtype_setting: str | None = None,
        attention_backend: str = "auto",
        enforce_eager: bool = False,
        cpu_threads: int | None = None,
    ) -> None:
        # Built without an EngineConfig in tests and benches: the same bounds, from inference.config.
        for name, value in (
            ("block_size", block_size),
            ("max_num_seqs", max_num_seqs),
            ("max_num_batched_tokens", max_num_batched_tokens),
        ):
            check_positive(name, value)
        check_memory_fraction(gpu_memory_utilization)
        if not isinstance(loaded.model, DecoderForCausalLM):
            raise ValueError(f"ModelRunner needs one of our models, got {type(loaded.model).__name__}")
        self.model: DecoderForCausalLM = loaded.model
        self.device = loaded.device
        self.block_size = block_size
        self.vocab_size = self.model.args.vocab_size
        if self.device.type == "cpu":
            torch.set_num_threads(cpu_thread_count(cpu_threads))
        compute = str(loaded.dtype).removeprefix("torch.")
        kv_dtype = resolve_kv_dtype(
            kv_cache_dtype, compute, dtype_setting=dtype_setting or compute, device_type=self.device.type
        )
        self.kv_dtype: torch.dtype = getattr(torch, kv_dtype)
        if self.device.type == "cuda" and self.kv_dtype != loaded.dtype:
            # The GPU backends (flash-attn, Triton) read the cache in the queries' dtype.
            raise ValueError(
                f"kv_cache_dtype={kv_cache_dtype} applies on CPU only; on a GPU the KV cache takes the "
                f"compute dtype ({compute}): set kv_cache_dtype to auto"
            )
        self.backend = select_backend(
            attention_backend,
            device=self.device,
            dtype=loaded.dtype,
            kv_dtype=self.kv_dtype,
            block_size=block_size,
            num_kv_heads=self.model.args.num_kv_heads,
            head_dim=self.model.args.head_dim,
            avx512_kernels=loaded.avx512_kernels,
            avx2_kernels=loaded.avx2_kernels,
            sliding_window=self.model.has_sliding_window,
            softcap=self.model.has_softcap,
        )
        self.attention_backend_name = self.backend.name
        self.kv_window: int | None = self.model.kv_window
        self.loaded_avx512_kernels = loaded.avx512_kernels
        # Until sized, the model may run (CUDA profiling) with any cache; max_model_len bounds nothing yet.
        self.max_model_len = loaded.context_length
        self.num_blocks = 0
        self.decode_graphs: DecodeGraphs | None = None
        self.fused_decode: NativeDecode | None = None
        # perf_counter when the latest execute() had its inputs on the device: the engine's step timings
        # split inputs from forward there.
        self.inputs_ready_at = 0.0
        self.supports_in_flight_ids = True  # execute() takes async scheduling's device-resident ids

        spec = self.model.kv_cache_spec(self.kv_dtype)
        per_block = spec.bytes_per_block(block_size)
        context = loaded.context_length
        if self.device.type == "cuda" and kv_cache_memory_bytes is None:
            budget = self._profile_cuda_budget(gpu_memory_utilization, max_num_batched_tokens, max_num_seqs)
        else:
            budget = cpu_kv_budget(
                kv_cache_memory_bytes,
                bytes_per_token=per_block // block_size,
                max_model_len=min(context, max_model_len or context),
                max_num_seqs=max_num_seqs,
                block_size=block_size,
            )
        self.num_blocks = budget.bytes // per_block
        if self.num_blocks < 1:
            raise ValueError(
                f"{budget.source} leaves {mib(budget.bytes)}: not even one KV block ({per_block} bytes);"
                " raise it, or lower block_size"
            )
        self.kv_capacity_tokens = self.num_blocks * block_size
        self.kv_cache_bytes = self.num_blocks * per_block
        self.max_model_len = self._resolve_max_model_len(max_model_len, context, per_block, budget)

        caches = allocate_kv_cache(
            spec, num_blocks=self.num_blocks, block_size=block_size, device=self.device
        )
        self.model.bind_kv_cache(self.backend, caches)
        graphable = getattr(self.backend, "supports_cuda_graphs", False)
        if self.device.type == "cuda" and graphable and not enforce_eager:
            if self.model.cuda_graph_capturable(self.device, loaded.dtype):
                self.decode_graphs = self._capture_decode_graphs(max_num_seqs)
            else:
                logger.info("Decoding eagerly: the model's experts do not take the fused kernel here")
        self.fused_decode = fused_decode(self.model, self.device)
        logger.info(
            "KV cache size: %d tokens (%d blocks x %d, %s in %s, from %s); attention backend: %s",
            self.kv_capacity_tokens,
            self.num_blocks,
            block_size,
            mib(self.kv_cache_bytes),
            str(self.kv_dtype).removeprefix("torch."),
            budget.source,
            self.attention_backend_name,
        )
        if self.fused_decode is not None:
            rows = self.fused_decode.max_rows
            logger.info("Decoding rows run their layers in native calls of up to %d rows", rows)

    @property
    def rows_apart(self) -> bool:
        """Whether decoding rows take other kernels than prompt chunks, so that a row recomputed in a prompt
        chunk could round apart from its first pass: the AVX512 block reads (and their fused stack). The
        AVX2 kernels, fused stack included, give a row the same bits on either path."""
        return self.loaded_avx512_kernels

    @property
    def cuda_graph_sizes(self) -> list[int]:
        return list(self.decode_graphs.sizes) if self.decode_graphs is not None else []

    def _capture_decode_graphs(self, max_num_seqs: int) -> DecodeGraphs | None:
        graphs = DecodeGraphs(
            self.model,
            cast(GraphableBackend, self.backend),
            max_batch=max_num_seqs,
            block_size=self.block_size,
            max_blocks_per_seq=-(-self.max_model_len // self.block_size),
            device=self.device,
        )
        try:
            graphs.capture()
        except torch.cuda.OutOfMemoryError as exc:
            # The cache was sized before capture; a card this full still serves, one launch at a time.
            logger.warning("Not enough GPU memory to capture CUDA graphs (%s); decoding eagerly", exc)
            torch.cuda.empty_cache()
            return None
        except RuntimeError as exc:
            raise RuntimeError(
                f"capturing CUDA graphs for decode failed: {exc}. "
                "Set enforce_eager: true to serve without them."
            ) from exc
        return graphs

    def _resolve_max_model_len(
        self, requested: int | None, context: int, per_block: int, budget: KVBudget
    ) -> int:
        if requested is None:
            resolved = min(context, self.kv_capacity_tokens)
            logger.info(
                "max_model_len: %d (model context %d, KV cache holds %d tokens)",
                resolved,
                context,
                self.kv_capacity_tokens,
            )
            return resolved
        if requested < 1:
            raise ValueError(f"max_model_len must be >= 1, got {requested}")
        if requested > context:
            raise ValueError(f"max_model_len={requested} exceeds the model's context length {context}")
        if requested > self.kv_capacity_tokens:
            needed = -(-requested // self.block_size) * per_block
            raise max_model_len_error(
                requested, capacity_tokens=self.kv_capacity_tokens, needed_bytes=needed, budget=budget
            )
        return requested

    def _profile_cuda_budget(self, utilization: float, max_tokens: int, max_seqs: int) -> KVBudget:
        """Run the largest step the scheduler may send on a throwaway cache and keep what is left."""
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(self.device)
        used_before = total - free
        allocated_before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        # Longest allowed sequences filling the token budget: the worst case for attention and the MLP alike.
        seq_len = max(1, min(self.max_model_len, max_tokens))
        num_seqs = min(max_seqs, -(-max_tokens // seq_len))
        blocks_per_seq = -(-seq_len // self.block_size)
        spec = self.model.kv_cache_spec(self.kv_dtype)
        scratch = allocate_kv_cache(
            spec, num_blocks=num_seqs * blocks_per_seq, block_size=self.block_size, device=self.device
        )
        scratch_bytes = spec.bytes_per_block(self.block_size) * num_seqs * blocks_per_seq
        self.model.bind_kv_cache(self.backend, scratch)
        self.num_blocks = num_seqs * blocks_per_seq
        chunks = [
            ScheduledChunk(
                [0] * seq_len, 0, seq_len, list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq))
            )
            for i in range(num_seqs)
        ]
        self.execute(chunks)
        torch.cuda.synchronize(self.device)
        activations = torch.cuda.max_memory_allocated(self.device) - allocated_before - scratch_bytes
        del scratch, chunks
        self.model.bind_kv_cache(self.backend, [(torch.empty(0), torch.empty(0))] * spec.num_layers)
        torch.cuda.empty_cache()
        other = used_before + max(activations, 0)
        available = int(total * utilization) - other
        logger.info(
            "Profiled step peak: %s activations, %s in use before", mib(activations), mib(used_before)
        )
        return KVBudget(
            max(available, 0),
            f"gpu_memory_utilization={utilization:.2f} of {mib(total)}",
            total_device_bytes=total,
            other_usage_bytes=other,
        )

    def release(self) -> None:
        """Unbind the KV cache from the model so its memory is freed even while the model object lives on."""
        empty = (torch.empty(0), torch.empty(0))
        self.model.bind_kv_cache(self.backend, [empty] * self.model.args.num_layers)
        self.fused_decode = None  # it holds the caches too
        self.num_blocks = 0

    @torch.inference_mode()
    def execute(self, chunks: list[ScheduledChunk], in_flight: InFlightIds | None = None) -> StepLogits:
        """One forward over every chunk; float32 logits at each chunk's last position (all on request).

        in_flight: input ids still on the device (async scheduling), written over the chunks' placeholders.
        """
        batch = host_batch(
            chunks, block_size=self.block_size, max_model_len=self.max_model_len, num_blocks=self.num_blocks
        )
        # The graph and fused paths copy their inputs inside their forward call, which counts as forward.
        self.inputs_ready_at = time.perf_counter()
        graphs = self.decode_graphs
        if (
            graphs is not None
            and len(batch.input_ids) == len(chunks) <= graphs.max_batch
            and not any(c.return_all_logits for c in chunks)
        ):
            hidden = graphs.run(
                batch.input_ids,
                batch.positions,
                batch.slots,
                batch.block_tables,
                batch.context_lens,
                in_flight,
            )
            return StepLogits(last=self.model.compute_logits(hidden).float(), all_positions={})
        fused = self.fused_decode
        if fused is not None and decoding_rows_fused(fused, [c.decoding for c in chunks]):
            if in_flight is not None:
                in_flight.patch_host(batch.input_ids)
            return self._logits(chunks, batch.query_lens, self._split_forward(fused, chunks, batch))
        return self._logits(chunks, batch.query_lens, self._module_forward(chunks, batch, in_flight))

    def _split_forward(
        self, fused: NativeDecode, chunks: list[ScheduledChunk], batch: HostBatch
    ) -> torch.Tensor:
        """Decoding chunks through the native stack, however many and whatever else the step holds; prompt
        chunks through the modules. A generated token's numerics then never depend on its step's company."""
        decoding = [i for i, c in enumerate(chunks) if c.decoding]
        if len(decoding) == len(chunks):  # a decode-only step: no subset to copy
            return _native_forward(fused, batch)
        decodes, decode_rows = batch.subset(decoding)
        decoded = _native_forward(fused, decodes)
        prompting = [i for i, c in enumerate(chunks) if not c.decoding]
        prompts, prompt_rows = batch.subset(prompting)
        prompted = self._module_forward([chunks[i] for i in prompting], prompts, None)
        hidden = decoded.new_empty((len(batch.input_ids), decoded.shape[1]))
        hidden[torch.from_numpy(decode_rows)] = decoded
        hidden[torch.from_numpy(prompt_rows)] = prompted
        return hidden

    def _module_forward(
        self, chunks: list[ScheduledChunk], batch: HostBatch, in_flight: InFlightIds | None
    ) -> torch.Tensor:
        """The final hidden states of every row through the model's modules."""
        dev = self.device
        layout = BatchLayout(
            query_lens=batch.query_lens,
            context_lens=batch.context_lens,
            block_tables=batch.block_tables,
            slot_mapping=_to_device(batch.slots, dev),
            block_size=self.block_size,
            device=dev,
        )
        meta = self.backend.build_metadata(layout)
        input_ids = _to_device(batch.input_ids, dev)
        if in_flight is not None:
            in_flight.patch(input_ids)
        positions = _to_device(batch.positions, dev)
        self.inputs_ready_at = time.perf_counter()
        with module_rows([c.decoding for c in chunks]):
            return self.model(input_ids, positions, meta)

    def _logits(
        self, chunks: list[ScheduledChunk], query_lens: list[int], hidden: torch.Tensor
    ) -> StepLogits:
        """float32 logits at each chunk's last position, and at all of a chunk's positions where it asks,
        from one pass through the head over just those rows."""
        wanted: list[int] = []  # rows of `hidden` that need logits
        last_rows: list[int] = []  # where each chunk's last position sits in `wanted`
        spans: dict[int, tuple[int, int]] = {}
        offset = 0
        for i, (chunk, n) in enumerate(zip(chunks, query_lens, strict=True)):
            if chunk.return_all_logits:
                spans[i] = (len(wanted), len(wanted) + n)
                wanted.extend(range(offset, offset + n))
            else:
                wanted.append(offset + n - 1)
            last_rows.append(len(wanted) - 1)
            offset += n
        rows = hidden if len(wanted) == len(hidden) else hidden.index_select(0, _index(wanted, hidden.device))
        logits = self.model.compute_logits(rows).float()
        last = logits if last_rows == list(range(len(wanted))) else logits[_index(last_rows, logits.device)]
        return StepLogits(last=last, all_positions={i: logits[a:b] for i, (a, b) in spans.items()})


def _native_forward(fused: NativeDecode, batch: HostBatch) -> torch.Tensor:
    """The final hidden states of a batch of decoding chunks, every row through the native stack."""
    tables = [t for t, n in zip(batch.block_tables, batch.query_lens, strict=True) for _ in range(n)]
    return fused.run_rows(batch.input_ids, batch.positions, batch.slots, tables)


def _index(rows: list[int], device: torch.device) -> torch.Tensor:
    return _to_device(np.asarray(rows, dtype=np.int64), device)


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if device.type == "cuda":
        # From pinned memory the copy is truly asynchronous; from pageable memory non_blocking still blocks.
        # The caching host allocator keeps the pinned block alive until the copy has run.
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)
