"""`mooncake check`'s table: every setting's effective value and source, console overrides included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from gguf import GGMLQuantizationType
from huggingface_hub import constants

from tests.webapp.serving.hub_cache import REPO, hub_snapshot
from webapp.core import native_paths
from webapp.core.config import resolve_settings
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.serving.config_report import config_report

pytestmark = pytest.mark.database


def _line(lines: list[str], name: str, after: str | None = None) -> list[str]:
    """The row for `name` (in the section titled `after`) as [name, value, source...]."""
    start = lines.index(after) if after else 0
    return next(line.split() for line in lines[start:] if line.split()[:1] == [name])


def test_console_rows_show_as_console(db: None, settings: Any, tmp_path: Any) -> None:
    settings.MOONCAKE_SETTINGS = resolve_settings(
        {"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_DRAIN_TIMEOUT": "12"}, base_dir=tmp_path, cwd=tmp_path
    )
    report = config_report()
    assert _line(report.lines, "drain_timeout") == [
        "drain_timeout",
        "12.0",
        "env",
        "(MOONCAKE_DRAIN_TIMEOUT)",
    ]
    assert not report.problems

    EngineSettings.objects.create(drain_timeout_seconds=5, max_num_seqs=4)
    ModelRegistration.objects.create(name="extra", source="default", dtype="float32")
    report = config_report()
    lines = report.lines
    assert _line(lines, "drain_timeout") == ["drain_timeout", "5.0", "console", "(tuning", "page)"]
    title = "engine: extra (registered in the console)"
    assert title in lines
    assert _line(lines, "max_num_seqs", title) == ["max_num_seqs", "4", "console", "(tuning", "page)"]
    assert _line(lines, "dtype", title)[:3] == ["dtype", "float32", "console"]
    # mooncake.yaml's own model starts without the console's layer.
    builtin = next(line for line in lines if line.startswith("engine: SmolLM2"))
    assert _line(lines, "max_num_seqs", builtin) == ["max_num_seqs", "64", "default"]


def test_a_bad_registration_is_a_problem_not_a_crash(db: None) -> None:
    EngineSettings.objects.create(block_size=0)
    ModelRegistration.objects.create(name="broken", source="default")
    report = config_report()
    assert any(p.startswith("engine settings (broken)") and "block_size" in p for p in report.problems)


def test_a_batch_too_small_for_the_sequences_is_a_problem_before_any_load(db: None) -> None:
    """The scheduler would refuse it at load; `mooncake check` says so first, naming both settings."""
    EngineSettings.objects.create(max_num_seqs=128, max_num_batched_tokens=64)
    ModelRegistration.objects.create(name="tight", source="default")
    report = config_report()
    assert any(
        p.startswith("engine settings (tight)")
        and "max_num_batched_tokens (64) must be >= max_num_seqs (128)" in p
        for p in report.problems
    ), report.problems


def test_one_models_max_model_len_the_load_would_refuse_is_a_problem(
    db: None, settings: Any, tmp_path: Any
) -> None:
    """Without a models list there is no budget plan, but what the load would refuse is still named."""
    config = tmp_path / "mooncake.yaml"
    config.write_text("model: {model_id: default, max_model_len: 100000}\n")
    resolved = resolve_settings(
        {"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_CONFIG": str(config)}, base_dir=tmp_path, cwd=tmp_path
    )
    settings.MOONCAKE_SETTINGS, settings.MOONCAKE = resolved, resolved.yaml
    report = config_report()
    assert any("max_model_len=100000 exceeds the model's context length 8192" in p for p in report.problems)


def test_each_model_says_whether_it_runs_natively_and_how(
    db: None, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.inference.arch_files import CPU_BF16, gguf_file, hf_dir

    monkeypatch.setattr(native_paths, "device_facts", lambda device, kernels: CPU_BF16)  # not this CPU
    llama = hf_dir(tmp_path / "llama", "LlamaForCausalLM")
    neox = hf_dir(tmp_path / "neox", "GPTNeoXForCausalLM")
    q4 = gguf_file(tmp_path / "q4.gguf", kind=GGMLQuantizationType.Q4_0)
    entries = [
        {"id": "llama", "model_path": str(llama), "default": True},
        {"id": "neox", "model_path": str(neox)},
        {"id": "q4", "model_path": str(q4)},
        {"id": "gone", "model_path": str(tmp_path / "gone")},
    ]
    config = tmp_path / "mooncake.yaml"
    config.write_text(yaml.safe_dump({"model": {"models": entries}}))
    resolved = resolve_settings(
        {"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_CONFIG": str(config)}, base_dir=tmp_path, cwd=tmp_path
    )
    settings.MOONCAKE_SETTINGS, settings.MOONCAKE = resolved, resolved.yaml
    ModelRegistration.objects.create(name="extra", source=str(q4), dtype="float32")
    lines = config_report().lines

    def runs(name: str) -> str:
        title = next(line for line in lines if line.startswith(f"engine: {name} ("))
        return " ".join(_line(lines, "runs", title)[1:])

    assert runs("llama") == "native: LlamaForCausalLM, bf16 dense"
    assert runs("neox") == (
        "not native: our engine does not run GPTNeoXForCausalLM (engine type transformers does)"
    )
    assert runs("q4") == "native: LlamaForCausalLM, GGUF blocks read as stored"
    assert runs("gone") == "native engine; architecture unknown (its files are not here)"
    assert runs("extra") == "native: LlamaForCausalLM, fp32 dense"  # the console's dtype


def test_a_memory_budget_with_a_hub_id_is_checked_from_the_cache(
    db: None, settings: Any, tmp_path: Path, hf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One model by hub id and a budget: sized from its cached snapshot, as its load would refuse it; not
    cached, `check` says its size is unknown until downloaded (and never downloads it)."""
    config = tmp_path / "mooncake.yaml"
    config.write_text(yaml.safe_dump({"model": {"model_id": REPO, "dtype": "float32"}}))
    env = {
        "MOONCAKE_DATA": str(tmp_path),
        "MOONCAKE_CONFIG": str(config),
        "MOONCAKE_MEMORY_BUDGET_BYTES": "100000",
    }
    resolved = resolve_settings(env, base_dir=tmp_path, cwd=tmp_path)
    settings.MOONCAKE_SETTINGS, settings.MOONCAKE = resolved, resolved.yaml
    settings.MOONCAKE_MEMORY_BUDGET_BYTES = 100_000
    # Downloads allowed (so not caching it is no problem of its own), from a hub nothing listens on.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")

    report = config_report()
    unknown = [line for line in report.lines if line.startswith("memory plan:")]
    assert unknown == [
        f"memory plan:  {REPO}: size unknown until downloaded ({REPO} is not in the Hugging Face cache); "
        "the memory budget is checked when it loads"
    ]
    assert not any(REPO in p for p in report.problems), report.problems

    hub_snapshot(hf_home)
    report = config_report()
    planned = [line for line in report.lines if line.startswith("memory plan:")]
    assert len(planned) == 1 and "size unknown" not in planned[0] and "KV cache" in planned[0], planned
    [problem] = [p for p in report.problems if REPO in p]
    assert problem.startswith(f"{REPO} (model) does not fit"), problem
    assert "than the 0.00 GiB that the memory budget (MOONCAKE_MEMORY_BUDGET_BYTES" in problem
