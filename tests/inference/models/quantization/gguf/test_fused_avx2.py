"""On the AVX2 block path (fp32, forced here by cpu_isa on any CPU with AVX2), decoding rows run every decoder
layer in one native call (csrc/avx2/decode_layers.cpp) and get the module path's bits: the same final hidden
states, so the same logits and greedy tokens. The bound asserted is zero: the stack calls the modules' own
kernels (block products, paged attention, ATen's mean and SiLU) in their order, and every other operation is
one fp32 rounding per element, so no summation is reordered (an fp32 reordering would show up as ~1e-6
relative, and the 14-bit activations could turn it into whole-level flips)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inference import LLMEngine, SamplingParams
from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.kernels import build as kernel_build
from inference.models.loader.load import LoadedModel, load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.gguf import fused_avx2_check
from inference.models.quantization.gguf.fused_avx2 import Avx2FusedDecode
from tests.inference.kquant_files import requantize_q4_k_m
from tests.inference.real_model import decode_chunks, make_engine, prompts, runner_of

pytestmark = pytest.mark.skipif(not kernel_build.avx2_supported(), reason="the AVX2 kernels need AVX2")

LOGGER = "inference.models.quantization.gguf"
FILES = ["Q4_1", "Q4_0", "Q8_0", "Q4_K_M", "IQ4_XS"]  # the bundled file, then requantizations of it


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each type's file (Q4_K_M: Q4_K, Q6_K and, where rows are not whole super-blocks, Q8_0)."""
    folder = tmp_path_factory.mktemp("avx2_fused")
    files = {"Q4_1": default_gguf_path()}
    for mix in FILES[1:]:
        files[mix] = folder / f"smollm2-135m-{mix.lower()}.gguf"
        requantize_q4_k_m(default_gguf_path(), files[mix], mix=mix)
    return files


def load(path: Path, cache_dir: Path, **settings: Any) -> LoadedModel:
    return load_model(str(path), device="cpu", cache_dir=cache_dir, cpu_isa="avx2", **settings)


@pytest.fixture(scope="module")
def q4_1(test_cache_dir: Path) -> LoadedModel:
    return load(default_gguf_path(), test_cache_dir)


def engine_for(loaded: LoadedModel, **overrides: Any) -> LLMEngine:
    settings: dict[str, Any] = {"dtype": "auto", "cpu_isa": "avx2", "max_num_seqs": 3}
    return make_engine(loaded, **{**settings, **overrides})


def stack_of(engine: LLMEngine) -> Avx2FusedDecode:
    stack = runner_of(engine).fused_decode
    assert isinstance(stack, Avx2FusedDecode)
    return stack


def native_and_modules(engine: LLMEngine, num_seqs: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """One decode step's logits through the stack and through the modules (the engine's own steps before it
    must have gone through the stack)."""
    runner, stack = runner_of(engine), stack_of(engine)
    calls: list[int] = []
    original = Avx2FusedDecode.run

    def counted(self: Avx2FusedDecode, ids: np.ndarray, *rest: Any) -> torch.Tensor:
        calls.append(len(ids))
        return original(self, ids, *rest)

    monkeypatch.setattr(Avx2FusedDecode, "run", counted)
    chunks = decode_chunks(engine, num_seqs, steps=10)
    assert num_seqs in calls
    native = runner.execute(chunks).last
    runner.fused_decode = None
    modules = runner.execute(chunks).last  # rewrites the same slots with the module path's K/V
    runner.fused_decode = stack
    return native, modules


@pytest.mark.parametrize("which", FILES)
def test_every_block_type_decodes_through_the_stack_with_the_modules_bits(
    which: str, gguf_files: dict[str, Path], test_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_for(load(gguf_files[which], test_cache_dir))
    stack = stack_of(engine)
    expected = {"Q4_1": {0}, "Q4_0": {0}, "Q8_0": {0}, "Q4_K_M": {0, 12, 14}, "IQ4_XS": {0, 23}}[which]
    assert set(stack.kinds) == expected  # 0: (levels, dm) blocks; K-quants by ggml's id
    native, modules = native_and_modules(engine, 3, monkeypatch)
    assert torch.equal(native, modules)


@pytest.mark.parametrize(
    "settings",
    [
        {"kv_cache_dtype": "float32"},
        {"kv_cache_dtype": "bfloat16"},
        {"kv_cache_dtype": "float16"},
        {"kquant_activations": "int8"},
    ],
    ids=["fp32-cache", "bf16-cache", "fp16-cache", "int8-activations"],
)
def test_a_rounded_cache_or_int8_activations_keep_the_modules_bits(
    settings: dict[str, str],
    gguf_files: dict[str, Path],
    test_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """K/V are stored in the cache's dtype (fp16 where `auto` computes in fp32 on a CPU) as write_kv rounds
    them, and read back as paged_attention reads them; int8 activations (llama.cpp's) go to the same
    kernels' int8 path."""
    activations = settings.get("kquant_activations", "int16")
    loaded = load(gguf_files["Q4_K_M"], test_cache_dir, kquant_activations=activations)
    engine = engine_for(loaded, **settings)
    assert stack_of(engine).kernel.wide == (activations != "int8")
    native, modules = native_and_modules(engine, 2, monkeypatch)
    assert torch.equal(native, modules)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["Q4_1", "Q4_K_M"])
def test_greedy_answers_are_the_modules_answers(
    which: str, gguf_files: dict[str, Path], test_cache_dir: Path
) -> None:
    """Eight prompts, 24 tokens, three at a time (prompt chunks beside decoding rows included)."""
    loaded = load(gguf_files[which], test_cache_dir)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    answers = []
    for fused in (True, False):
        engine = engine_for(loaded)
        if not fused:
            runner_of(engine).fused_decode = None  # the switch: the module path for every row
        outputs = engine.generate(prompts(loaded.tokenizer), params)
        answers.append([out.outputs[0].token_ids for out in outputs])
    assert answers[0] == answers[1]


def test_a_rows_bits_do_not_depend_on_the_other_rows(q4_1: LoadedModel) -> None:
    """64 rows, each over its own two blocks of random keys, computed together, in every prefix of the batch
    (1 to 64 rows), reversed, and cut into calls of 7 rows: each row gets the same bits every time."""
    engine = engine_for(q4_1, max_num_seqs=64, kv_cache_memory_bytes=256 << 20)
    stack = stack_of(engine)
    block_size = int(stack.k_caches[0].shape[1])
    generator = torch.Generator().manual_seed(1)
    for cache in (*stack.k_caches, *stack.v_caches):
        cache.copy_(torch.randn(cache.shape, generator=generator))
    rows = 64
    rng = np.random.default_rng(0)
    ids = rng.integers(0, stack.model.args.vocab_size, rows)
    positions = rng.integers(0, 2 * block_size, rows)
    tables = [[2 * r, 2 * r + 1] for r in range(rows)]
    slots = np.array(
        [t[p // block_size] * block_size + p % block_size for t, p in zip(tables, positions, strict=True)]
    )
    full = stack.run(ids, positions, slots, tables)
    for n in range(1, rows + 1):
        assert torch.equal(stack.run(ids[:n], positions[:n], slots[:n], tables[:n]), full[:n]), n
    back = [np.ascontiguousarray(a[::-1]) for a in (ids, positions, slots)]
    assert torch.equal(stack.run(back[0], back[1], back[2], tables[::-1]), full.flip(0))
    assert torch.equal(replace(stack, max_rows=7).run_rows(ids, positions, slots, tables), full)


def test_a_speculative_chunk_in_the_stack_equals_its_decode_steps(q4_1: LoadedModel) -> None:
    """Verifying drafts as extra rows of one sequence gives the tokens one-row steps give."""
    tokenizer = q4_1.tokenizer
    prompt = list(tokenizer.encode("red green blue red green blue red green blue red green blue"))
    params = SamplingParams(temperature=0, max_tokens=32)
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    plain = engine_for(q4_1).generate([prompt], params)[0].outputs[0].token_ids
    engine = engine_for(q4_1, speculative=spec)
    stack_of(engine)
    assert engine.generate([prompt], params)[0].outputs[0].token_ids == plain
    assert engine.stats().spec_decode_num_accepted_tokens > 5


def test_models_it_cannot_run_keep_the_module_path_and_say_why(
    q4_1: LoadedModel, default_loaded: LoadedModel, caplog: pytest.LogCaptureFixture
) -> None:
    assert Avx2FusedDecode.build(default_loaded.model) is None  # type: ignore[arg-type]  # dense fp32: silent
    model = q4_1.model
    assert isinstance(model, DecoderForCausalLM)
    engine = engine_for(q4_1)
    args = model.args
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"qkv_bias": True}, "takes no biases or q/k norms"),
        ({"mlp_bias": True}, "takes no biases or q/k norms"),
        ({"qk_norm": True}, "takes no biases or q/k norms"),
        ({"head_dim": 260}, "needs head_dim a multiple of 8 up to 256"),
        ({"intermediate_size": 1540}, "needs head_dim a multiple of 8 up to 256 and hidden sizes"),
    ]
    try:
        for change, reason in refusals:
            model.args = replace(args, **change)
            with caplog.at_level("INFO", logger=LOGGER):
                caplog.clear()
                assert Avx2FusedDecode.build(model) is None, change
            assert f"the fused AVX2 decode stack {reason}" in caplog.text, change
    finally:
        model.args = args
    backend = model.decoder_layers()[0].self_attn.attn.backend
    try:
        backend.native = False  # type: ignore[union-attr]  # SDPA's fp32 rows: not what the stack computes
        with caplog.at_level("INFO", logger=LOGGER):
            assert Avx2FusedDecode.build(model) is None
        assert "needs the modules to attend through csrc/avx2/paged_attention.cpp" in caplog.text
    finally:
        backend.native = True  # type: ignore[union-attr]
    assert Avx2FusedDecode.build(model) is not None
    del engine


def test_a_stack_that_disagrees_at_load_keeps_the_module_path_and_says_so(
    q4_1: LoadedModel, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Avx2FusedDecode.run

    def off_by_an_ulp(self: Avx2FusedDecode, *args: Any) -> torch.Tensor:
        out = original(self, *args)
        return torch.nextafter(out, out + 1)

    monkeypatch.setattr(Avx2FusedDecode, "run", off_by_an_ulp)
    with caplog.at_level("WARNING", logger=LOGGER):
        engine = engine_for(q4_1)
    assert runner_of(engine).fused_decode is None
    assert "the fused AVX2 decode stack disagrees with the modules at load" in caplog.text
    out = engine.generate([prompts(q4_1.tokenizer)[0]], SamplingParams(temperature=0, max_tokens=4))
    assert len(out[0].outputs[0].token_ids) == 4

    def broken(self: Avx2FusedDecode, *args: Any) -> torch.Tensor:
        raise RuntimeError("slot out of the cache")

    monkeypatch.setattr(Avx2FusedDecode, "run", broken)
    caplog.clear()
    with caplog.at_level("WARNING", logger=LOGGER):
        assert runner_of(engine_for(q4_1)).fused_decode is None
    assert "failed its check (slot out of the cache)" in caplog.text
    monkeypatch.setattr(Avx2FusedDecode, "run", original)
    monkeypatch.setattr(fused_avx2_check, "disagreement", lambda stack: 0.5)
    caplog.clear()
    with caplog.at_level("WARNING", logger=LOGGER):
        assert runner_of(engine_for(q4_1)).fused_decode is None
    assert "(largest difference 0.5 in the final hidden states)" in caplog.text


def test_indexes_outside_the_cache_are_refused_before_any_read(q4_1: LoadedModel) -> None:
    stack = stack_of(engine_for(q4_1, max_num_seqs=1))
    blocks, block_size = stack.k_caches[0].shape[:2]
    model = q4_1.model
    assert isinstance(model, DecoderForCausalLM)
    args = model.args
    hidden = torch.randn(1, args.hidden_size)
    cos, sin = model.rotary.cos_sin(torch.tensor([0]), torch.float32)

    def call(position: int, slot: int, table: list[int], *, counts: Any = None, kinds: Any = None) -> Any:
        return torch.ops.mooncake_avx2.decode_layers(
            hidden, torch.tensor([position]), cos, sin, torch.tensor([slot]),
            torch.tensor([table], dtype=torch.int32), stack.k_caches, stack.v_caches, stack.norms,
            stack.weights, stack.dms, kinds or stack.kinds, counts or stack.counts,
            args.num_heads, args.num_kv_heads, 1e-5, 0.125, True,
        )  # fmt: skip

    assert call(0, 0, [0]).shape == (1, args.hidden_size)
    with pytest.raises(RuntimeError, match="slot out of the cache"):
        call(0, blocks * block_size, [0])
    with pytest.raises(RuntimeError, match="block table entry out of the cache"):
        call(0, 0, [blocks])
    with pytest.raises(RuntimeError, match="context longer than its table"):
        call(block_size, 0, [0])
    with pytest.raises(RuntimeError, match="four projections per layer"):
        call(0, 0, [0], counts=stack.counts[:-1])
    with pytest.raises(RuntimeError, match="K-quant rows must be uint8 super-blocks"):  # Q4_1 named Q6_K
        call(0, 0, [0], kinds=[14, *stack.kinds[1:]])
