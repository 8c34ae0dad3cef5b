"""Our model implementations, by concept (as vLLM's model_executor): architectures/ (one module per family),
layers/, quantization/ (how weights are held and multiplied, and the one plan that decides it), gguf/ (the
file format, torch-free), loader/ and kernels/ (the native CPU libraries). registry.py names what runs here
without importing torch."""
