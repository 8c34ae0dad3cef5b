"""SupervisedEngine: engine types vllm, sglang and tgi. Mooncake starts that engine's own server as a child
process (inference.frontends.supervised.process), waits for its health, and then talks to it as type
`openai` does.

When the child dies, the engine reports itself dead to the model manager, which restarts the model (a new
child) with the back-off and bounds it applies to every engine, showing the model "restarting" and then
"loaded", or "failed" once the restarts are spent. Unloading or shutting down stops the child.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

from inference.config import EngineConfig
from inference.frontends.remote.engine import RemoteEngine
from inference.frontends.remote.upstream import Upstream
from inference.frontends.supervised.process import (
    HOST,
    SERVER_KINDS,
    EngineProcess,
    free_port,
    server_command,
)
from inference.models.loader.tokenizer import TokenizerSource, load_tokenizer_source
from inference.status import EngineHealth

logger = logging.getLogger(__name__)


class SupervisedEngine(RemoteEngine):
    def __init__(
        self, config: EngineConfig, source: TokenizerSource, upstream: Upstream, process: EngineProcess
    ) -> None:
        super().__init__(config, source, upstream)
        self.process = process
        server = config.server()
        self.model_details = {
            "architecture": f"{config.engine_type} server (pid {process.pid}, tensor parallel "
            f"{server.tensor_parallel_size}, pipeline parallel {server.pipeline_parallel_size}"
            f"{', expert parallel' if server.expert_parallel else ''})"
        }

    @classmethod
    def start(  # type: ignore[override]  # the web layer passes what the engine may not look up itself
        cls, config: EngineConfig, *, executable: str, log_dir: Path
    ) -> SupervisedEngine:
        """Load the tokenizer (a missing one fails before a long GPU load), start the server, wait for its
        /health; EngineServerError, with its log's tail, when it exits or does not answer in time."""
        source = load_tokenizer_source(
            config.model,
            model_roots=config.model_roots,
            cache_dir=Path(config.cache_dir) if config.cache_dir else None,
        )
        kind = SERVER_KINDS[config.engine_type]
        port = free_port()
        root = f"http://{HOST}:{port}"
        process = EngineProcess(
            server_command(config, executable=executable, port=port),
            health_url=root + kind.health_path,
            log_path=log_dir / f"{kind.name}-{_file_name(config.model)}.log",
            startup_timeout=config.server().startup_timeout,
        )
        process.start()
        try:
            upstream = Upstream(root + kind.api_path, api_key=None, timeout=config.remote().request_timeout)
            engine = cls(config, source, upstream, process)
            engine.health_monitor.start()
        except BaseException:
            process.stop()
            raise
        return engine

    def health(self) -> EngineHealth:
        if self.process.exit_error is not None:
            return EngineHealth("dead", self.process.exit_error)
        return super().health()

    def set_on_death(self, callback: Callable[[RemoteEngine], None]) -> None:
        """The child's death is this engine's: the manager restarts the model, which starts a new child."""
        self.process.on_exit(lambda why: callback(self))

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        try:
            super().shutdown(drain_timeout=drain_timeout)
        finally:
            self.process.stop()


def _file_name(model: str) -> str:
    """A log file name from a model id or path (its last parts, safe characters only)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_.")[-80:] or "model"
