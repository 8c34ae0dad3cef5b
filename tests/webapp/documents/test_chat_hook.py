"""The admission hook end to end with the scripted engine: documents in the prompt, citations on the reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.chat.fakes import FakeEngine, FakeManager
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from tests.webapp.documents.files import make_pdf
from webapp.chat import services as chat_services
from webapp.chat.events import message_html
from webapp.chat.models import Conversation, Message
from webapp.documents import services
from webapp.documents.context import PREAMBLE
from webapp.documents.hooks import add_system_text, extend
from webapp.documents.models import Document, MessageCitation

if TYPE_CHECKING:
    from webapp.serving.runtime import Runtime

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


class CharTokenizer:
    """One token per character, as the scripted engine's template makes them."""

    def __len__(self) -> int:
        return 0x110000

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


@dataclass
class TokenizingEngine(FakeEngine):
    tokenizer: CharTokenizer = field(default_factory=CharTokenizer)  # type: ignore[assignment]


@pytest.fixture
def engine(runtime: Runtime) -> TokenizingEngine:
    engine = TokenizingEngine(reply="The filling is lotus paste.")
    runtime.install_manager(FakeManager(engine))  # type: ignore[arg-type]
    return engine


PAGES = ["Mooncakes are eaten at the festival.", "The filling is lotus seed paste.", "Keep them dry."]


async def _ask(user: User, chat: Conversation, question: str) -> list[dict[str, object]]:
    ws = await connected(user, chat.pk)
    await ws.send_json_to({"type": "send", "content": question})
    events = await receive_until(ws, is_idle)
    await ws.disconnect()
    return events


@pytest.mark.database
async def test_documents_reach_the_prompt_and_the_reply_cites_them(
    engine: TokenizingEngine, alice: User, chat: Conversation
) -> None:
    await sync_to_async(services.document_upload)(
        owner=alice, name="cakes.pdf", data=make_pdf(PAGES), conversation=chat
    )
    events = await _ask(alice, chat, "What is the filling?")
    prompt = engine.prompts[0]
    assert prompt.startswith(f"<system>{PREAMBLE}") and "The filling is lotus seed paste." in prompt
    assert prompt.endswith("<user>What is the filling?<assistant>")
    reply = await Message.objects.filter(role="assistant").afirst()
    assert reply is not None
    cites = [c async for c in MessageCitation.objects.filter(message=reply)]
    assert cites and cites[0].page == 2 and cites[0].document_name == "cakes.pdf" and cites[0].whole_document
    final = [e for e in events if e["type"] == "upsert"][-1]["html"]
    assert "Sources · " in str(final) and "page 2" in str(final) and "lotus seed paste" in str(final)
    # The page, rendered from the database, shows the same.
    html = await sync_to_async(message_html)(reply)
    assert "cakes.pdf" in html and "page 2" in html


@pytest.mark.database
async def test_system_prompt_stays_first_and_chats_without_documents_are_untouched(
    engine: TokenizingEngine, alice: User, chat: Conversation
) -> None:
    await sync_to_async(chat_services.conversation_update_settings)(
        conversation=chat, system_prompt="Be terse.", model="", temperature=0.2, top_p=0.9, max_tokens=50
    )
    await _ask(alice, chat, "Hello")
    assert engine.prompts[0] == "<system>Be terse.<user>Hello<assistant>"
    await sync_to_async(services.document_upload)(
        owner=alice, name="cakes.pdf", data=make_pdf(PAGES), conversation=chat
    )
    await _ask(alice, chat, "Filling?")
    assert engine.prompts[1].startswith(f"<system>Be terse.\n\n{PREAMBLE}")
    replies = [m async for m in Message.objects.filter(role="assistant").order_by("id")]
    assert await MessageCitation.objects.filter(message=replies[0]).acount() == 0
    assert await MessageCitation.objects.filter(message=replies[1]).acount() > 0


@pytest.mark.database
async def test_documents_fit_the_models_context(
    engine: TokenizingEngine, alice: User, chat: Conversation
) -> None:
    engine.max_model_len = 900
    long = [f"Page {i} is about rain and weather in the hills." * 6 for i in range(12)]
    await sync_to_async(services.document_upload)(
        owner=alice, name="rain.pdf", data=make_pdf(long), conversation=chat
    )
    await _ask(alice, chat, "Which page is about rain?")
    prompt = engine.prompts[0]
    assert "[1] rain.pdf, page" in prompt  # passages, not the whole document
    assert len(prompt) + engine.params[0].max_tokens <= 900


@pytest.mark.database
async def test_documents_still_being_read_are_left_out(
    engine: TokenizingEngine, alice: User, chat: Conversation
) -> None:
    document = await sync_to_async(services.document_upload)(
        owner=alice, name="cakes.pdf", data=make_pdf(PAGES), conversation=chat
    )
    await Document.objects.filter(pk=document.pk).aupdate(state=Document.State.EXTRACTING)
    await _ask(alice, chat, "What is the filling?")
    assert engine.prompts[0] == "<user>What is the filling?<assistant>"
    assert await MessageCitation.objects.acount() == 0


async def test_the_extender_ignores_anything_but_a_chat(engine: TokenizingEngine) -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert await extend(object(), messages, engine) is messages  # type: ignore[arg-type]
    assert add_system_text(messages, "ctx") == [{"role": "system", "content": "ctx"}, *messages]
