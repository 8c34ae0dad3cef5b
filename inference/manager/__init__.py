"""The model manager: which models are loaded, their memory budget, eviction, restarts and hand-over."""
