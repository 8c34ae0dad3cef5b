"""GPU check: correctness oracle and offline throughput of LLMEngine vs Hugging Face continuous batching.

    python -m bench.gpu_check [--models qwen3-0.6b,llama3-8b] [--num-prompts 256] [--budget-s 420]
    python -m bench.gpu_check --smoke        # tiny config on CPU: checks the plumbing in seconds

Needs no network and no files: each model is built from a config with seeded random weights, saved as
safetensors (with a generated word-level tokenizer) to a temporary directory, and that directory is what
both sides load, so the oracle compares like with like. Works with transformers 5.17 (the GPU machine's)
and 5.24 (ours); hf_compat.py adapts the calls where their continuous-batching APIs differ.

Per model, in this order (each phase guarded: a crash is printed with its traceback, and the check goes on):
1. build: random weights in the target dtype on the device, saved.
2. HF oracle: greedy tokens of HF `generate` for a few prompts, with HF's logits at every step.
3. HF throughput: `--num-prompts` prompts of random token ids (input 100-1024, output 100-1024, no EOS)
   through HF's ContinuousBatchingManager. The HF model is then freed, so both sides get the same memory.
4. ours: LLMEngine loads the saved directory; oracle: our greedy tokens vs HF's. A divergence where HF's
   logits of the two candidates are within `--tie-tol` is reported as a tie (bf16 rounding), not a failure.
5. our throughput on the same prompts (async scheduling unless `--sync-steps`), with the engine's per-phase
   step times and its full-batch decode steps against their memory-bound floor (floor.py).

Both throughput runs of a model get the same time slice, carved from `--budget-s` after reserving an estimate
of the setup still ahead; a run cut short says so, and counts the tokens generated so far. The final tables
come last (whoever reads only the tail of the log gets them); `--json` also writes everything as JSON.
Exit status: 0 when every phase ran and every oracle passed, 1 otherwise.

Modules: zoo (model shapes, building, prompts), budget (the time budget), hf_compat and hf_side (Hugging
Face), ours (our engine), floor (a decode step's memory-bound floor), oracle (comparing tokens), report
(results and their output), run (one model's phases), cli (options and the loop over models).
"""
