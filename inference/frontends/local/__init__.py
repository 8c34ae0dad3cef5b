"""Our engine in this process: the asyncio front, the engine thread and its admission gate."""
