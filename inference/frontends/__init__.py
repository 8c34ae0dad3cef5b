"""How a model is served: our engine in this process (local), an OpenAI-compatible upstream (remote), a
server we start and supervise (supervised), and transformers' own batching (transformers)."""
