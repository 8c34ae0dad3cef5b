"""What a check found: its settings, each model's report and runs, printed as markdown and written as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass(kw_only=True)
class Settings:
    device: str
    dtype: str
    num_prompts: int
    input_len: tuple[int, int]
    output_len: tuple[int, int]
    oracle_prompts: int
    oracle_tokens: int
    tie_tol: float
    budget_s: float
    gpu_memory_utilization: float
    seed: int
    eager: bool = False
    oracle_only: bool = False
    async_scheduling: bool | None = None  # None: the engine's default (on for CUDA)
    bandwidth_gbs: float | None = None  # the device's copy bandwidth for the floor; None: see floor.py


@dataclass
class Throughput:
    system: str
    seconds: float = 0.0
    requests_done: int = 0
    requests: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    peak_mem_mib: float = 0.0
    slice_s: float = 0.0
    cut: bool = False
    error: str = ""  # the run went wrong without raising (failed requests, a dead manager)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    def add_note(self, text: str) -> None:
        self.note = f"{self.note}; {text}" if self.note else text


@dataclass
class ModelReport:
    name: str
    oracle: list[str] = field(default_factory=list)
    oracle_failed: bool = False
    runs: list[Throughput] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    build_s: float = 0.0
    model_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)  # to calibrate Budget's setup estimates

    @property
    def failed(self) -> bool:
        return self.oracle_failed or bool(self.errors)


def environment() -> dict[str, Any]:
    import transformers

    env: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__}
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def print_header(settings: Settings) -> None:
    env = ", ".join(f"{k} {v}" for k, v in environment().items())
    print(f"\n## GPU check ({settings.device}, {settings.dtype}, {settings.num_prompts} prompts)\n")
    print(f"{env}; budget {settings.budget_s:.0f}s\n", flush=True)


def print_reports(reports: list[ModelReport], settings: Settings) -> None:
    for report in reports:
        print(f"### {report.name} (built in {report.build_s:.0f}s, {report.model_s:.0f}s in all)")
        verdict = "FAILED" if report.oracle_failed else "ok" if report.oracle else "not run"
        print(f"oracle: {verdict}")
        for line in report.oracle:
            print(f"  - {line}")
        for error in report.errors:
            print(f"  - CRASHED {error}")
        memory = "peak allocated (MiB)" if settings.device.startswith("cuda") else "peak RSS (MiB)"
        print(
            f"\n| system | done/requests | seconds | slice | output tok/s | total tok/s | {memory} | note |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for run in report.runs:
            total = (run.output_tokens + run.prompt_tokens) / run.seconds if run.seconds else 0.0
            note = run.note.replace("|", "\\|")  # "paged|sdpa" would split the markdown cell
            print(
                f"| {run.system} | {run.requests_done}/{run.requests} | {run.seconds:.1f} "
                f"| {run.slice_s:.0f} | {run.tok_s:.0f} | {total:.0f} | {run.peak_mem_mib:.0f} | {note} |"
            )
        for run in report.runs:
            for key in ("phases", "floor"):
                if run.extra.get(key):
                    print(f"\n{run.system} {key}: {run.extra[key]}")
        by_system = {run.system.split()[0]: run for run in report.runs}
        if "ours" in by_system and "HF" in by_system and by_system["HF"].tok_s:
            cut = " (a run was cut short: compare with care)" if any(r.cut for r in report.runs) else ""
            print(f"\nours/HF output tok/s: {by_system['ours'].tok_s / by_system['HF'].tok_s:.2f}{cut}")
        print()


def verdict(reports: list[ModelReport], models: list[str], interrupted: str) -> str:
    """One line: every problem, or that all went well; and which runs were cut at their slice."""
    problems = [f"{r.name}: oracle FAILED" for r in reports if r.oracle_failed]
    problems += [f"{r.name}: {e}" for r in reports for e in r.errors]
    problems += [interrupted] if interrupted else []
    problems += [f"{m}: not run" for m in models[len(reports) :]]
    cut = [f"{r.name} {run.system.split()[0]}" for r in reports for run in r.runs if run.cut]
    line = "PROBLEMS: " + " | ".join(problems) if problems else "all phases ran, oracle ok"
    return line + (f"; cut short at their slice: {', '.join(cut)}" if cut else "")


def write_json(path: str, reports: list[ModelReport], settings: Settings, status: dict[str, Any]) -> None:
    data = {
        "environment": environment(),
        "settings": dataclasses.asdict(settings),
        **status,
        "models": [
            {
                "model": r.name,
                "build_s": r.build_s,
                "model_s": r.model_s,
                "oracle": r.oracle,
                "oracle_failed": r.oracle_failed,
                "errors": r.errors,
                "phase_s": r.phase_s,
                "runs": [dict(dataclasses.asdict(run), tok_s=run.tok_s) for run in r.runs],
            }
            for r in reports
        ],
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    partial.replace(target)  # a run killed mid-write still leaves the previous complete file
