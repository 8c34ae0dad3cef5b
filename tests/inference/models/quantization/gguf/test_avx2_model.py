"""End to end on a CPU without AVX512-BF16 (on one that has it, the test says it lacks it: the kernels use
only AVX2): `dtype: auto` is fp32 there, and a GGUF's projections keep only their blocks, read as stored by
csrc/avx2/blocks.cpp. With 14-bit activations (K-quants by default, every type with `kquant_activations:
int16`) the bundled Q4_1 model and its Q4_K_M requantization answer greedily as transformers does in fp32
with the same (dequantized) weights; by default a file of Q4/Q8_0 blocks takes int8 activations, which its
measured perplexity allows (bench/perplexity.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from inference import SamplingParams, device
from inference.models.gguf.convert import ensure_converted
from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.loader.load import LoadedModel, load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.base import DenseMethod
from inference.models.quantization.gguf.avx2 import Avx2Kernel
from inference.models.quantization.gguf.embedding import BlockEmbedding
from inference.models.quantization.gguf.layout import KQuantWeight
from inference.models.quantization.gguf.method import GGUFBlocksMethod
from tests.inference.kquant_files import requantize_q4_k_m
from tests.inference.real_model import make_engine, prompts

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not kernel_build.avx2_supported(), reason="needs AVX2")]

TOKENS = 16


@pytest.fixture
def avx2_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on an AVX2-only CPU: no fast bf16, and no AVX512 library."""
    monkeypatch.setattr(device, "fast_bf16_cpu", lambda: False)
    monkeypatch.setattr(kernel_build, "cpu_supported", lambda: False)


@pytest.fixture(scope="module")
def q4_k_m_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("avx2_q4_k_m") / "smollm2-135m-q4_k_m.gguf"
    requantize_q4_k_m(default_gguf_path(), target)
    return target


def greedy(loaded: LoadedModel) -> list[list[int]]:
    engine = make_engine(loaded, dtype="auto", max_model_len=1024, kv_cache_memory_bytes=64 << 20)
    params = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in engine.generate(prompts(loaded.tokenizer), params)]


@torch.inference_mode()
def transformers_fp32(model_dir: Path, all_prompts: list[list[int]]) -> list[list[int]]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = None  # as ignore_eos
    replies = []
    for prompt in all_prompts:
        ids = torch.tensor([prompt])
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=TOKENS, pad_token_id=0
        )
        replies.append(out[0, len(prompt) :].tolist())
    return replies


@pytest.mark.usefixtures("avx2_cpu")
@pytest.mark.parametrize(("which", "activations"), [("Q4_1", "int16"), ("Q4_K_M", "auto")])
def test_a_gguf_keeps_only_its_blocks_and_answers_like_its_fp32_reference(
    which: str, activations: str, q4_k_m_file: Path, test_cache_dir: Path
) -> None:
    """Every projection reads its blocks at every batch size (the prompts' chunks too) and holds no dense
    weight; the embedding looks its rows up in the tied head's blocks. Measured: with 14-bit activations
    (the Q4_K_M file's default) 8 of 8 prompts' first 16 greedy tokens agree with transformers' fp32 model
    for both files (with llama.cpp's int8 activations, 3 and 4 of 8)."""
    path = default_gguf_path() if which == "Q4_1" else q4_k_m_file
    loaded = load_model(
        str(path), dtype="auto", device="cpu", cache_dir=test_cache_dir, kquant_activations=activations
    )
    assert loaded.dtype == torch.float32 and not loaded.avx512_kernels
    linears = [m for m in loaded.model.modules() if isinstance(m, Linear)]
    projections = [m for m in linears if isinstance(m.method, GGUFBlocksMethod)]
    assert len(projections) == 30 * 4
    assert all(m.weight.numel() == 0 for m in projections)
    assert all(
        isinstance(m.method, GGUFBlocksMethod) and isinstance(m.method.kernel, Avx2Kernel) for m in linears
    )
    embedding = loaded.model.model.embed_tokens  # type: ignore[union-attr]
    head = loaded.model.tied_head
    assert isinstance(head, GGUFBlocksMethod) and isinstance(head.kernel, Avx2Kernel)
    assert embedding.weight.numel() == 0 and isinstance(embedding.lookup, BlockEmbedding)
    assert embedding.lookup.weight is head.parts[0]  # the tied head's blocks, shared
    kinds = {part.type_id for m in projections for part in m.method.parts if isinstance(part, KQuantWeight)}
    assert kinds == (set() if which == "Q4_1" else {12, 14})  # Q4_K and Q6_K down projections
    reference = transformers_fp32(ensure_converted(path, test_cache_dir), prompts(loaded.tokenizer))
    agree = sum(a == b for a, b in zip(greedy(loaded), reference, strict=True))
    assert agree >= 6, f"{agree}/8 prompts agree with transformers in fp32 for {TOKENS} tokens"


@pytest.mark.usefixtures("avx2_cpu")
def test_the_bundled_models_default_takes_int8_activations(test_cache_dir: Path) -> None:
    """A file of Q4_1 and Q8_0 blocks meets int8 activations by default (kquant_activations "auto"): the
    answers are the int8 setting's, and not the 14-bit one's, whose first 16 tokens differ on some prompts."""
    answers = {}
    for activations in ("auto", "int8", "int16"):
        loaded = load_model(
            str(default_gguf_path()),
            dtype="auto",
            device="cpu",
            cache_dir=test_cache_dir,
            kquant_activations=activations,
        )
        head = loaded.model.tied_head
        assert isinstance(head, GGUFBlocksMethod) and isinstance(head.kernel, Avx2Kernel)
        assert head.kernel.wide is (activations == "int16")
        answers[activations] = greedy(loaded)
    assert answers["auto"] == answers["int8"] != answers["int16"]


@pytest.mark.usefixtures("avx2_cpu")
@pytest.mark.parametrize("settings", [{"dtype": "float32"}, {"dtype": "auto", "gguf_dense_copy": True}])
def test_float32_by_name_or_a_dense_copy_asked_for_keeps_the_dense_weights(
    settings: dict[str, object], test_cache_dir: Path
) -> None:
    """dtype float32, asked for by name, is for outputs equal to an fp32 reference: no quantized input; a
    dense copy asked for is the fp32 model itself."""
    loaded = load_model(str(default_gguf_path()), device="cpu", cache_dir=test_cache_dir, **settings)
    linears = [m for m in loaded.model.modules() if isinstance(m, Linear)]
    assert linears and all(isinstance(m.method, DenseMethod) for m in linears)


def test_cpu_isa_avx2_takes_this_path_on_any_cpu_with_avx2(test_cache_dir: Path) -> None:
    """No stand-in here: the setting itself caps the kernels, as a user measuring this path on a larger
    CPU would set it."""
    loaded = load_model("default", device="cpu", cache_dir=test_cache_dir, cpu_isa="avx2")
    assert loaded.dtype == torch.float32 and not loaded.avx512_kernels and loaded.avx2_kernels
    methods = [m.method for m in loaded.model.modules() if isinstance(m, Linear)]
    assert len(methods) == 30 * 4
    assert all(isinstance(m, GGUFBlocksMethod) and isinstance(m.kernel, Avx2Kernel) for m in methods)
