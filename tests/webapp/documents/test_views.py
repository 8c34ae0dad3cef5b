"""Upload, status, download, attach, citations and the collections page over HTTP; isolation and cascades."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django.urls import reverse

from tests.webapp.documents.files import make_docx, make_pdf
from webapp.celery import app
from webapp.chat import services as chat_services
from webapp.chat.models import Conversation, Message
from webapp.documents import indexing, services
from webapp.documents.models import Attachment, Collection, Document, DocumentChunk, MessageCitation

pytestmark = [pytest.mark.database, pytest.mark.django_db, pytest.mark.usefixtures("eager")]


@pytest.fixture
def client_a(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def post_file(client: Client, chat: Conversation, name: str, data: bytes) -> tuple[int, str]:
    url = reverse("documents:chat_upload", args=[chat.pk])
    response = client.post(url, {"file": SimpleUploadedFile(name, data)})
    return response.status_code, response.content.decode()


def test_upload_into_a_chat_is_extracted_and_shown(client_a: Client, chat: Conversation) -> None:
    status, html = post_file(client_a, chat, "cakes.pdf", make_pdf(["one", "two"]))
    assert status == 201 and "cakes.pdf" in html
    document = Document.objects.get()
    assert document.state == "ready" and document.page_count == 2 and document.conversation == chat
    assert DocumentChunk.objects.filter(document=document).count() == 2
    tray = client_a.get(reverse("documents:chat_tray", args=[chat.pk])).content.decode()
    assert "cakes.pdf" in tray and "Ready · 2 pages" in tray
    status_html = client_a.get(reverse("documents:status", args=[document.pk])).content.decode()
    assert "Ready" in status_html and "hx-trigger" not in status_html  # polling stops once ready


def test_progress_while_queued_and_extracting(client_a: Client, chat: Conversation) -> None:
    # A broker that holds the job: nothing runs it, so the document stays queued.
    broker = app.conf.broker_url
    app.conf.task_always_eager, app.conf.broker_url = False, "memory://"
    try:
        status, html = post_file(client_a, chat, "a.txt", b"hello")
    finally:
        app.conf.task_always_eager, app.conf.broker_url = True, broker
    assert status == 201 and "Queued" in html and 'hx-trigger="every 1s"' in html
    document = Document.objects.get()
    Document.objects.filter(pk=document.pk).update(state="extracting", progress_done=3, progress_total=10)
    html = client_a.get(reverse("documents:status", args=[document.pk])).content.decode()
    assert "Reading page 3 of 10" in html and 'hx-trigger="every 1s"' in html
    # A second task while one reads it does nothing; the queued task runs once; a redelivery does nothing.
    assert indexing.document_extract(document_id=document.pk) == "extracting"
    Document.objects.filter(pk=document.pk).update(state="queued")
    indexing.document_extract(document_id=document.pk)
    assert Document.objects.get().state == "ready"
    assert indexing.document_extract(document_id=document.pk) == "ready"


@pytest.mark.parametrize(
    ("name", "data", "status", "message"),
    [
        ("photo.png", b"\x89PNG....", 415, "not supported"),
        ("fake.pdf", b"just text", 415, "not a PDF"),
        ("empty.txt", b"", 400, "is empty"),
    ],
)
def test_bad_uploads_get_a_clear_error(
    client_a: Client, chat: Conversation, name: str, data: bytes, status: int, message: str
) -> None:
    got, html = post_file(client_a, chat, name, data)
    assert got == status and message in html and 'role="alert"' in html
    assert not Document.objects.exists()


def test_corrupt_files_fail_on_the_attachment_not_with_a_500(client_a: Client, chat: Conversation) -> None:
    status, _ = post_file(client_a, chat, "broken.pdf", b"%PDF-1.4\n" + b"\x00junk" * 50)
    assert status == 201
    status, _ = post_file(client_a, chat, "broken.docx", b"PK\x03\x04garbage" * 20)
    assert status == 201
    pdf, docx = Document.objects.order_by("id")
    assert pdf.state == docx.state == "failed"
    assert "could not be read as a PDF" in pdf.error and "Word document" in docx.error
    html = client_a.get(reverse("documents:status", args=[pdf.pk])).content.decode()
    assert "Failed: broken.pdf could not be read as a PDF" in html


@override_settings(MOONCAKE_DOCUMENTS_MAX_BYTES=1000)
def test_oversized_files_are_refused(client_a: Client, chat: Conversation) -> None:
    status, html = post_file(client_a, chat, "big.txt", b"x" * 1001)
    assert status == 413 and "up to" in html
    # Over the declared length: refused before the body is parsed.
    url = reverse("documents:chat_upload", args=[chat.pk])
    response = client_a.post(url, {"file": SimpleUploadedFile("huge.txt", b"x" * 200_000)})
    assert response.status_code == 413 and "too large" in response.content.decode()
    assert not Document.objects.exists()


@override_settings(MOONCAKE_DOCUMENTS_PER_CHAT=2)
def test_documents_per_chat_limit(client_a: Client, chat: Conversation) -> None:
    assert post_file(client_a, chat, "a.txt", b"a")[0] == 201
    assert post_file(client_a, chat, "b.txt", b"b")[0] == 201
    status, html = post_file(client_a, chat, "c.txt", b"c")
    assert status == 409 and "at most 2 documents" in html


def test_missing_file_and_get_are_refused(client_a: Client, chat: Conversation) -> None:
    url = reverse("documents:chat_upload", args=[chat.pk])
    response = client_a.post(url, {})
    assert response.status_code == 400 and "Choose a file" in response.content.decode()
    assert client_a.get(url).status_code == 405


def test_download_is_an_attachment(client_a: Client, chat: Conversation) -> None:
    post_file(client_a, chat, "page.html", b"<script>alert(1)</script><p>x</p>")
    response = client_a.get(reverse("documents:download", args=[Document.objects.get().pk]))
    assert response.status_code == 200 and response.content == b"<script>alert(1)</script><p>x</p>"
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith('attachment; filename="page.html"')


def test_another_users_ids_are_404_everywhere(
    client: Client, alice: User, bob: User, chat: Conversation
) -> None:
    shelf = services.collection_create(owner=alice, name="Shelf")
    document = services.document_upload(owner=alice, name="a.txt", data=b"secret words", conversation=chat)
    kept = services.document_upload(owner=alice, name="k.txt", data=b"kept words", collection=shelf)
    reply = Message.objects.create(conversation=chat, role="assistant", content="hi")
    MessageCitation.objects.create(
        message=reply, document=document, document_name="a.txt", quote="secret", rank=1
    )
    bobs_chat = chat_services.conversation_create(user=bob)
    client.force_login(bob)
    gets = [
        reverse("documents:status", args=[document.pk]),
        reverse("documents:download", args=[document.pk]),
        reverse("documents:chat_tray", args=[chat.pk]),
        reverse("documents:message_citations", args=[reply.pk]),
    ]
    for url in gets:
        assert client.get(url).status_code == 404, url
    posts = [
        (reverse("documents:delete", args=[document.pk]), {}),
        (reverse("documents:chat_upload", args=[chat.pk]), {"file": SimpleUploadedFile("x.txt", b"x")}),
        (reverse("documents:chat_attach", args=[bobs_chat.pk]), {"collection": shelf.pk}),
        (reverse("documents:attach", args=[kept.pk]), {"conversation": bobs_chat.pk}),
        (reverse("documents:collection_attach", args=[shelf.pk]), {"conversation": bobs_chat.pk}),
        (
            reverse("documents:collection_upload", args=[shelf.pk]),
            {"file": SimpleUploadedFile("x.txt", b"x")},
        ),
        (reverse("documents:collection_delete", args=[shelf.pk]), {}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 404, url
    # Bob attaching his own collection to Alice's chat: her chat is a 404 to him.
    bobs = services.collection_create(owner=bob, name="Bob's")
    assert (
        client.post(reverse("documents:chat_attach", args=[chat.pk]), {"collection": bobs.pk}).status_code
        == 404
    )
    assert Document.objects.filter(owner=alice).count() == 2 and not Attachment.objects.exists()
    assert "secret" not in client.get(reverse("documents:index")).content.decode()


def test_deleting_the_chat_deletes_its_documents(client_a: Client, alice: User, chat: Conversation) -> None:
    post_file(client_a, chat, "a.txt", b"words")
    shelf = services.collection_create(owner=alice, name="Shelf")
    services.document_upload(owner=alice, name="k.txt", data=b"kept", collection=shelf)
    services.attach(conversation=chat, collection=shelf)
    reply = Message.objects.create(conversation=chat, role="assistant", content="hi")
    MessageCitation.objects.create(message=reply, document_name="a.txt", quote="words", rank=1)
    assert client_a.post(reverse("chat:delete", args=[chat.pk])).status_code in (200, 302)
    assert list(Document.objects.values_list("name", flat=True)) == ["k.txt"]  # the collection's stays
    assert not DocumentChunk.objects.filter(document__name="a.txt").exists()
    assert not Attachment.objects.exists() and not MessageCitation.objects.exists()


def test_collections_page_create_upload_attach_delete(
    client_a: Client, alice: User, chat: Conversation
) -> None:
    index = reverse("documents:index")
    assert "no collections yet" in client_a.get(index).content.decode()
    client_a.post(reverse("documents:collection_new"), {"name": "  Recipes "})
    shelf = Collection.objects.get()
    assert shelf.name == "Recipes"
    response = client_a.post(reverse("documents:collection_new"), {"name": "Recipes"}, follow=True)
    assert "already have a collection named" in response.content.decode()
    files = [SimpleUploadedFile("r.docx", make_docx([("h1", "Buns"), ("p", "Bake at 200C.")])),
             SimpleUploadedFile("bad.exe", b"MZ")]  # fmt: skip
    page = client_a.post(
        reverse("documents:collection_upload", args=[shelf.pk]), {"file": files}, follow=True
    )
    text = page.content.decode()
    assert (
        "Uploaded r.docx to Recipes" in text and "bad.exe: bad.exe: this file type is not supported" in text
    )
    assert "r.docx" in text and "Ready" in text
    chat_services.user_message_create(conversation=chat, content="hi")
    client_a.post(reverse("documents:collection_attach", args=[shelf.pk]), {"conversation": chat.pk})
    assert Attachment.objects.filter(conversation=chat, collection=shelf).exists()
    tray = client_a.get(reverse("documents:chat_tray", args=[chat.pk])).content.decode()
    assert "Recipes" in tray and "Detach Recipes" in tray
    attachment = Attachment.objects.get()
    client_a.post(reverse("documents:chat_detach", args=[chat.pk, attachment.pk]))
    assert not Attachment.objects.exists()
    client_a.post(reverse("documents:chat_attach", args=[chat.pk]), {"collection": shelf.pk})
    assert Attachment.objects.count() == 1
    assert (
        client_a.post(reverse("documents:chat_attach", args=[chat.pk]), {"collection": "x"}).status_code
        == 400
    )
    client_a.post(reverse("documents:collection_delete", args=[shelf.pk]))
    assert (
        not Collection.objects.exists() and not Document.objects.exists() and not Attachment.objects.exists()
    )


def test_a_chat_upload_attached_elsewhere_is_kept_in_chat_uploads(
    client_a: Client, alice: User, chat: Conversation
) -> None:
    document = services.document_upload(owner=alice, name="a.txt", data=b"a", conversation=chat)
    other = chat_services.conversation_create(user=alice)
    page = client_a.post(
        reverse("documents:attach", args=[document.pk]), {"conversation": other.pk}, follow=True
    )
    assert "Attached to the chat" in page.content.decode()
    document.refresh_from_db()
    assert document.conversation_id is None and document.collection is not None
    assert document.collection.name == "Chat uploads"
    # Both chats read it, and deleting the one it was uploaded in leaves it for the other.
    assert set(Attachment.objects.values_list("conversation_id", flat=True)) == {chat.pk, other.pk}
    chat.delete()
    assert Document.objects.filter(pk=document.pk).exists()


def test_citations_fragment(client_a: Client, chat: Conversation) -> None:
    reply = Message.objects.create(conversation=chat, role="assistant", content="hi")
    MessageCitation.objects.create(
        message=reply, document_name="a.pdf", page=7, quote="the <b>quote</b>", rank=1
    )
    html = client_a.get(reverse("documents:message_citations", args=[reply.pk])).content.decode()
    assert "a.pdf" in html and "page 7" in html and "the &lt;b&gt;quote&lt;/b&gt;" in html
    page = client_a.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert "Sources · 1 passage" in page and "doc-tray" in page and "documents/documents.js" in page


def test_login_required(client: Client, chat: Conversation) -> None:
    response = client.get(reverse("documents:index"))
    assert response.status_code == 302 and "/login/" in response["Location"]
