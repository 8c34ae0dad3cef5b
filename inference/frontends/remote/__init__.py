"""An OpenAI-compatible upstream (vLLM, SGLang, TGI, llama.cpp, Ollama) behind the engine contract."""
