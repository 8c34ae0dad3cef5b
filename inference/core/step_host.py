"""What async scheduling (async_step) needs of the engine that runs it, so that the two import one way."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from inference.config import EngineConfig
from inference.core.model_io import StepLogits
from inference.core.request import Request
from inference.core.sampler import Sampler
from inference.core.scheduler import Scheduler, SchedulerOutput
from inference.core.sequence import Sequence
from inference.metrics import MetricsCollector, StepClock
from inference.outputs import RequestOutput


class StepHost(Protocol):
    config: EngineConfig
    runner: Any  # the engine's Runner; the pipeline reads optional attributes with getattr
    scheduler: Scheduler
    sampler: Sampler
    metrics: MetricsCollector
    clock: StepClock
    max_model_len: int
    _requests: dict[str, Request]
    _failed_steps_in_a_row: int

    def fail_request(self, request_id: str, error: BaseException) -> None: ...

    def new_clock(self) -> StepClock: ...

    def lap_forward(self, started: float, sync: torch.device | None) -> None: ...

    def _execute(self, scheduled: SchedulerOutput) -> StepLogits | None: ...

    def mark_scheduled(self, scheduled: SchedulerOutput) -> None: ...

    def take_pending(self) -> list[RequestOutput]: ...

    def _postprocess(self, scheduled: SchedulerOutput, logits: StepLogits | None) -> list[RequestOutput]: ...

    def emit(self, touched: dict[str, Request], now: float) -> list[RequestOutput]: ...

    def _append_token(
        self,
        request: Request,
        seq: Sequence,
        token_id: int,
        lps: tuple[float, list[tuple[int, float]]] | None,
        now: float,
    ) -> None: ...
