"""Model sources: GGUF conversion cache, pickle refusal, architecture checks, tokenizer."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from inference import EngineConfig
from inference.cache_dir import UnsafeCacheError
from inference.device import resolve_dtype
from inference.models.gguf import convert as gguf_convert
from inference.models.loader.load import LoadedModel, load_from_config, load_model
from inference.models.loader.source import ModelSourceError, default_gguf_path, resolve_source


def test_default_source_is_the_bundled_gguf() -> None:
    path = resolve_source("default")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file()


def test_same_content_reuses_the_cached_conversion(
    default_model_dir: Path, test_cache_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A renamed copy has the same sha256, so it must hit the conversion made by the session fixture.
    copy = tmp_path / "renamed.gguf"
    shutil.copyfile(default_gguf_path(), copy)
    before = gguf_convert.conversion_count
    with caplog.at_level(logging.INFO, logger="inference.models.gguf.convert"):
        assert gguf_convert.ensure_converted(copy, test_cache_dir) == default_model_dir
    assert gguf_convert.conversion_count == before
    assert "Reusing converted GGUF" in caplog.text


@pytest.mark.slow
def test_gguf_converts_once_into_a_fresh_cache(tmp_path: Path) -> None:
    before = gguf_convert.conversion_count
    first = gguf_convert.ensure_converted(default_gguf_path(), tmp_path)
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    second = gguf_convert.ensure_converted(default_gguf_path(), tmp_path)
    assert first == second
    assert gguf_convert.conversion_count == before + 1
    assert (second / "model.safetensors").stat().st_mtime_ns == mtime
    assert json.loads((first / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not [p for p in (tmp_path / "gguf").iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_hash_memo_skips_rehashing(tmp_path: Path) -> None:
    data = tmp_path / "blob.gguf"
    data.write_bytes(b"x" * 1000)
    sha = gguf_convert.file_sha256(data, tmp_path / "cache")
    memo = json.loads((tmp_path / "cache" / "hash-memo.json").read_text())
    assert memo[str(data.resolve())]["sha256"] == sha
    # A memo hit is trusted while size and mtime match; a rewrite changes them and forces a rehash.
    memo[str(data.resolve())]["sha256"] = "memoized"
    (tmp_path / "cache" / "hash-memo.json").write_text(json.dumps(memo))
    assert gguf_convert.file_sha256(data, tmp_path / "cache") == "memoized"
    data.write_bytes(b"y" * 1001)
    assert gguf_convert.file_sha256(data, tmp_path / "cache") not in ("memoized", sha)


@pytest.mark.parametrize("name", ["model.bin", "weights.pt", "weights.pth", "model.ckpt"])
def test_pickle_files_are_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match="pickle"):
        resolve_source(str(tmp_path / name))


def test_directory_with_only_pickle_weights_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ModelSourceError, match="pickle"):
        load_model(str(tmp_path), device="cpu")


def test_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="does not exist"):
        resolve_source(str(tmp_path / "nope"))


def test_unsupported_architecture_lists_supported_ones_and_names_transformers(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    )
    save_file({"x": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    pattern = r"GPT2LMHeadModel.*it runs LlamaForCausalLM.*Qwen3ForCausalLM.*`type: transformers`"
    with pytest.raises(ValueError, match=pattern):
        load_model(str(tmp_path), device="cpu")


def hf_folder(path: Path) -> Path:
    """A folder that resolve_source takes for a Hugging Face model (nothing in it is loaded)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    save_file({"x": torch.zeros(1)}, str(path / "model.safetensors"))
    return path


def test_a_source_is_confined_to_the_model_roots_at_load(tmp_path: Path) -> None:
    """A link registered while it pointed inside the roots, then swapped to point outside, is refused when
    the model loads; the bundled default is always allowed; None leaves sources unrestricted."""
    roots = (str(tmp_path / "models"),)
    inside = hf_folder(tmp_path / "models" / "real")
    outside = hf_folder(tmp_path / "elsewhere")
    link = tmp_path / "models" / "registered"
    link.symlink_to(inside)
    assert resolve_source(str(link), model_roots=roots) == inside.resolve()
    link.unlink()
    link.symlink_to(outside)
    with pytest.raises(ModelSourceError, match="outside the allowed model roots"):
        load_model(str(link), device="cpu", model_roots=roots)
    with pytest.raises(ModelSourceError, match="outside the allowed model roots"):
        load_from_config(EngineConfig(model=str(link), device="cpu", model_roots=roots))
    assert resolve_source(str(link), model_roots=None).resolve() == outside
    assert resolve_source("default", model_roots=()) == default_gguf_path()


def test_a_model_folder_may_not_link_its_files_out_of_the_roots(tmp_path: Path) -> None:
    roots = [str(tmp_path / "models")]
    folder = hf_folder(tmp_path / "models" / "m")
    secret = tmp_path / "elsewhere.safetensors"
    secret.write_bytes(b"")
    (folder / "extra.safetensors").symlink_to(secret)
    with pytest.raises(ModelSourceError, match=r"elsewhere\.safetensors, outside"):
        resolve_source(str(folder), model_roots=roots)


def test_model_roots_come_from_yaml_lists_or_path_lists() -> None:
    assert EngineConfig.from_dict({"model_roots": ["/a", "/b"]}).model_roots == ("/a", "/b")
    assert EngineConfig.from_dict({"model_roots": "/a:/b"}).model_roots == ("/a", "/b")
    assert EngineConfig(model_roots=["/a"]).model_roots == ("/a",)  # type: ignore[arg-type]
    assert EngineConfig().model_roots is None


def test_a_gguf_is_not_converted_into_a_cache_others_may_write(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    with pytest.raises(UnsafeCacheError, match="writable by group or others"):
        load_model("default", device="cpu", cache_dir=cache)
    assert not (cache / "gguf").exists()


def test_the_cache_is_created_private(tmp_path: Path) -> None:
    cache = tmp_path / "new" / "cache"
    blob = tmp_path / "blob.gguf"
    blob.write_bytes(b"x" * 1000)
    gguf_convert.file_sha256(blob, cache / "gguf")
    assert (cache / "gguf").stat().st_mode & 0o777 == 0o700
    assert [p.name for p in (cache / "gguf").iterdir()] == ["hash-memo.json"]  # no temp file left


def test_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int3", torch.device("cpu"))


def test_loaded_default_model(default_loaded: LoadedModel, default_model_dir: Path) -> None:
    assert default_loaded.architecture == "LlamaForCausalLM"
    assert default_loaded.model_dir == default_model_dir
    assert default_loaded.context_length == 8192
    assert default_loaded.eos_token_ids == {2}
    assert default_loaded.dtype == torch.float32 and default_loaded.device == torch.device("cpu")
    assert 130e6 < default_loaded.num_params < 140e6  # tied embeddings counted once


def test_tokenizer_has_the_chat_template(default_loaded: LoadedModel) -> None:
    tok = default_loaded.tokenizer
    assert tok.chat_template
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert isinstance(text, str) and text.endswith("<|im_start|>assistant\n")
    assert tok.convert_ids_to_tokens(2) == "<|im_end|>"


@pytest.mark.slow
def test_conversion_matches_transformers_gguf_loader(default_model_dir: Path) -> None:
    """Guards the Q/K un-permutation, which logit tests against HF (same converted weights) cannot see."""
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    model = LlamaForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    theirs = load_gguf_checkpoint(str(default_gguf_path()), return_tensors=True, model_to_load=model)[
        "tensors"
    ]
    ours = load_file(str(default_model_dir / "model.safetensors"))
    assert set(ours) == set(theirs)
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name].to(tensor.dtype)), name
