"""transformers' own continuous batching, for architectures our engine does not run natively."""
