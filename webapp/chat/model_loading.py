"""The chat's side of loading a model on demand (webapp.serving.on_demand): a send with a model that is not
loaded starts its load, every tab of the chat shows "loading…" in the conversation meanwhile, and the reply
is written once it is ready. A pick in the header or the settings panel starts the load at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from django.template.loader import render_to_string

from webapp.chat import events, selectors
from webapp.chat.errors import notice_for
from webapp.chat.models import Conversation
from webapp.core.errors import MooncakeError
from webapp.serving.model_access import Viewer, viewer_for_user
from webapp.serving.model_states import ModelStatus
from webapp.serving.model_wait import configured_wait
from webapp.serving.on_demand import find, load_on_demand, wait_loaded
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)


def model_label(model: str) -> str:
    """The chat's model as people read it: its name, or the default model's ("" when there is none)."""
    if model:
        return model
    info = find(get_runtime().manager(), None)
    return info.name if info is not None else ""


async def ensure_model_ready(*, conversation: Conversation, model: str, viewer: Viewer) -> None:
    """Return once the chat's `model` ("" = the default) is loaded, loading it if it was not; raises the
    Unavailable or NotFound of webapp.serving.on_demand, which name the model and why."""
    if await _start(model, viewer) == ModelStatus.READY:
        return
    name = await database_sync_to_async(model_label)(model)
    await events.broadcast(conversation.pk, events.model_loading(name))
    try:
        await wait_loaded(name=name, bound=configured_wait(name))
    finally:
        await _loaded(conversation, name)


async def _start(model: str, viewer: Viewer) -> ModelStatus:
    return await database_sync_to_async(load_on_demand)(name=model or None, viewer=viewer)


async def _loaded(conversation: Conversation, name: str) -> None:
    """Every tab: the note goes, and the header's picker shows the model's new state."""
    picker = await database_sync_to_async(picker_html)(conversation)
    await events.broadcast(
        conversation.pk, events.model_loading(name, done=True), events.model(conversation, picker)
    )


class LoadWaits:
    """Actions waiting for their chat's model to load, off the socket: a socket handles one frame at a
    time, so waiting inside one would hold back what its tab is sent (the "loading…" note among them)
    and its Stop. One instance per runtime (load_waits())."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    async def defer(
        self, *, conversation: Conversation, model: str, act: Callable[[], Awaitable[object]]
    ) -> bool:
        """Start loading the chat's `model` when it is not loaded, and run `act` once it is; False (act not
        run) when it is ready now. A refusal is raised here; what fails later is told to every tab."""
        viewer = await database_sync_to_async(viewer_for_user)(user_id=conversation.user_id)
        if await _start(model, viewer) == ModelStatus.READY:
            return False
        name = await database_sync_to_async(model_label)(model)
        await events.broadcast(conversation.pk, events.model_loading(name))
        task = asyncio.create_task(self._after_load(conversation, name, act))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _after_load(
        self, conversation: Conversation, name: str, act: Callable[[], Awaitable[object]]
    ) -> None:
        try:
            try:
                await wait_loaded(name=name, bound=configured_wait(name))
            finally:
                await _loaded(conversation, name)
            await act()
        except Exception as exc:  # the tab that asked no longer waits on this: every tab is told
            if not isinstance(exc, MooncakeError):
                logger.exception("A chat action waiting for %s to load failed", name)
            notice = notice_for(exc, model=conversation.model)
            await events.broadcast(conversation.pk, events.error(notice.code, notice.message))

    async def wait_idle(self) -> None:
        """Wait for every deferred action (tests and shutdown)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))


def load_waits() -> LoadWaits:
    return get_runtime().service(LoadWaits)


def picker_html(conversation: Conversation, error: str = "") -> str:
    return render_to_string("chat/_model_picker.html", picker_context(conversation, error))


def picker_context(conversation: Conversation, error: str = "") -> dict[str, object]:
    """The header picker's context; while a model loads, the picker asks again shortly (any_loading)."""
    models = selectors.picker_models(user_id=conversation.user_id)
    return {
        "conversation": conversation,
        "picker_models": models,
        "default_model": selectors.default_model_name(),
        "model_missing": bool(conversation.model) and conversation.model not in {m.name for m in models},
        "model_error": error,
        "any_loading": any(m.view.status == ModelStatus.LOADING for m in models),
    }


def load_picked(*, conversation: Conversation) -> str:
    """Start loading the chat's newly picked model; "" when it is ready or on its way, else why it cannot
    load (naming it), for the picker to show. Blocking."""
    try:
        load_on_demand(name=conversation.model or None, viewer=viewer_for_user(user_id=conversation.user_id))
    except MooncakeError as exc:  # its sentences are written for users (on_demand names model and reason)
        return exc.message
    return ""
