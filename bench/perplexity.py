"""Perplexity of our engine against transformers' fp32 and llama.cpp's `llama-perplexity`, on one shipped
English text (bench/data/perplexity.txt, prose written for this project), for the bundled model and its
requantizations: issue 45's measure of the CPU paths' activation numerics.

    python -m bench.perplexity [--ctx 512] [--types Q4_1,Q4_K_M,...] [--settings default,avx2,...]

Every tool scores the same tokens the same way (bench/perplexity_windows.py: llama-perplexity's windows of
--ctx tokens, stride --ctx, second half scored), and the run refuses to report if llama.cpp's token stream
differs from ours. The requantized types are made by llama-quantize from an F32 GGUF dequantized from the
bundled Q4_1 file (bench/perplexity_files.py): they derive from the Q4_1 weights, since the model's true
f16 weights are not available offline. bench/build_llama_server.sh builds llama-perplexity and
llama-quantize. Each scorer runs in a child process; its result is cached under --work by file, scorer
and setting, so an interrupted run resumes. The table is appended to --log.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perplexity_files import ROOT, dequantize_to_f32, llama_perplexity, quantize, tensor_types
from bench.perplexity_scorers import SETTINGS, score_ours, score_reference
from bench.perplexity_windows import Perplexity, distance, summarize, window_nlls, windows

TEXT = ROOT / "bench" / "data" / "perplexity.txt"
REQUANTIZED = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ctx", type=int, default=512)
    parser.add_argument("--types", default=",".join(("Q4_1", *REQUANTIZED)), help="Q4_1: the bundled file")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--text", type=Path, default=TEXT)
    parser.add_argument("--work", type=Path, default=ROOT / "var" / "perplexity")
    parser.add_argument("--log", type=Path, default=None, help="append the table to this markdown file")
    parser.add_argument("--no-llama", action="store_true", help="skip llama-perplexity (not built)")
    parser.add_argument("--child", nargs=3, metavar=("SCORER", "MODEL", "SETTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        scorer, model, setting = args.child
        text = args.text.read_text(encoding="utf-8")
        result = (
            score_reference(Path(model), text, args.ctx, args.threads)
            if scorer == "ref"
            else score_ours(Path(model), text, args.ctx, setting, args.threads)
        )
        print("RESULT " + json.dumps(result))
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    from inference.models.loader.source import default_gguf_path

    args.work.mkdir(parents=True, exist_ok=True)
    settings = [s for s in args.settings.split(",") if s]
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise SystemExit(f"unknown settings {sorted(unknown)}; known: {', '.join(SETTINGS)}")
    files = model_files(default_gguf_path(), [t for t in args.types.split(",") if t], args)
    rows = []
    for kind, path in files.items():
        print(f"== {kind}: {path.name} {tensor_types(path)}", file=sys.stderr, flush=True)
        rows.append(measure(kind, path, settings, args))
    table = render(rows, settings, args)
    print(table)
    if args.log is not None:
        with args.log.open("a", encoding="utf-8") as log:  # others may append to the same log: never rewrite
            log.write(table + "\n")


def model_files(bundled: Path, kinds: list[str], args: argparse.Namespace) -> dict[str, Path]:
    files: dict[str, Path] = {}
    needs_f32 = [k for k in kinds if k != "Q4_1"]
    f32 = dequantize_to_f32(bundled, args.work / "smollm2-135m-f32-from-q4_1.gguf") if needs_f32 else None
    for kind in kinds:
        if kind == "Q4_1":
            files[kind] = bundled
        else:
            assert f32 is not None
            target = args.work / f"smollm2-135m-{kind.lower()}-from-q4_1.gguf"
            files[kind] = quantize(f32, target, kind, args.threads)
    return files


def measure(kind: str, path: Path, settings: list[str], args: argparse.Namespace) -> dict[str, Any]:
    ref = cached(args, path, "ref", "fp32", lambda: child(args, "ref", path, "-"))
    tokens = ref["tokens"]
    row: dict[str, Any] = {"type": kind, "ref": ref["ppl"], "ref_err": ref["err"], "paths": {}}
    if not args.no_llama:
        llama = cached(args, path, "llama", "cpp", lambda: llama_result(path, args))
        # The same windows only if the same tokens: llama.cpp tokenizes the file itself.
        scored = len(windows(len(tokens), args.ctx)) * args.ctx
        if llama["tokens"] != tokens[:scored]:
            raise SystemExit(
                f"{kind}: llama.cpp's tokens differ from ours; the perplexities would not compare"
            )
        row["llama"] = llama["ppl"]
    for setting in settings:
        ours = cached(args, path, "ours", setting, lambda s=setting: child(args, "ours", path, s))
        if ours["tokens"] != tokens:
            raise SystemExit(f"{kind} {setting}: the engine's tokenizer disagrees with transformers'")
        row[setting] = ours["ppl"]
        row["paths"][setting] = f"{ours['path']} ({ours['seconds']:.0f} s)"
    return row


def llama_result(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    ppl, err, tokens = llama_perplexity(path, args.text, args.ctx, args.threads, args.work)
    return {"ppl": ppl, "err": err, "tokens": tokens}


def child(args: argparse.Namespace, scorer: str, path: Path, setting: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.perplexity", "--ctx", str(args.ctx), "--threads", str(args.threads)]
    cmd += ["--text", str(args.text), "--child", scorer, str(path), setting]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{scorer} {setting} on {path.name} failed: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    ppl = score(result["logprobs"], args.ctx)
    return {**result, "ppl": ppl.ppl, "err": ppl.error, "count": ppl.count}


def score(logprobs: list[list[float]], ctx: int) -> Perplexity:
    return summarize([nll for window in logprobs for nll in window_nlls(window, ctx)])


def cached(args: argparse.Namespace, path: Path, scorer: str, setting: str, compute: Any) -> dict[str, Any]:
    """One scorer's result, kept in --work keyed by the file, text and context (a rerun resumes)."""
    key = hashlib.sha256(f"{path.resolve()}|{path.stat().st_size}|{args.text.read_bytes()!r}".encode())
    store = args.work / f"{key.hexdigest()[:16]}-{args.ctx}-{scorer}-{setting}.json"
    if store.is_file():
        cached_result: dict[str, Any] = json.loads(store.read_text())
        return cached_result
    started = time.perf_counter()
    result: dict[str, Any] = compute()
    print(f"   {scorer} {setting}: ppl {result['ppl']:.4f} in {time.perf_counter() - started:.0f} s",
          file=sys.stderr, flush=True)  # fmt: skip
    result.pop("logprobs", None)  # the perplexity is kept; the per-token values are large
    store.write_text(json.dumps(result))
    return result


def render(rows: list[dict[str, Any]], settings: list[str], args: argparse.Namespace) -> str:
    """The markdown table: each setting's distance to the fp32 reference beside llama.cpp's (a check mark
    where ours is no further, issue 45's bar for the default's numerics)."""
    head = ["type", "fp32 reference ppl", "llama.cpp ppl", *[f"ours ({s})" for s in settings]]
    head += [f"\\|{s} - ref\\| vs \\|llama.cpp - ref\\|" for s in settings]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        llama = row.get("llama")
        cells = [row["type"], f"{row['ref']:.4f} ± {row['ref_err']:.3f}"]
        cells.append("—" if llama is None else f"{llama:.4f}")
        cells += [f"{row[s]:.4f}" for s in settings]
        cells += [_versus(row[s], llama, row["ref"]) for s in settings]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"ctx {args.ctx}, stride {args.ctx}, second half scored; {args.threads} threads"]
    lines += [f"- {row['type']} {s}: {row['paths'][s]}" for row in rows for s in settings]
    return "\n".join([*lines, ""])


def _versus(ours: float, llama: float | None, ref: float) -> str:
    if llama is None:
        return f"{distance(ours, ref):.4f} vs —"
    mark = "✓" if distance(ours, ref) <= distance(llama, ref) else "✗"
    return f"{distance(ours, ref):.4f} vs {distance(llama, ref):.4f} {mark}"


if __name__ == "__main__":
    main()
