"""vLLM, SGLang or TGI started as a child process we supervise, then served as a remote upstream."""
