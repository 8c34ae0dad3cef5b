"""The engine core, blind to engine types: scheduling, the paged KV cache, the model runner, sampling and the
step loop (schedule, run, postprocess)."""
