"""Chat import judges an upload by its size before reading it: a large file is never loaded into memory."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import InMemoryUploadedFile, SimpleUploadedFile, TemporaryUploadedFile
from django.test import Client
from django.test.client import BOUNDARY, encode_multipart
from django.urls import reverse

from webapp.chat import transfer
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest

pytestmark = pytest.mark.django_db

# Passed as is: the test client encodes a body itself only for its own MULTIPART_CONTENT.
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create_user("alice", password="pw-alice-123")
    client.force_login(user)
    return user


def test_check_import_size() -> None:
    transfer.check_import_size(None)
    transfer.check_import_size(transfer.MAX_IMPORT_BYTES)
    with pytest.raises(InvalidRequest, match="too large"):
        transfer.check_import_size(transfer.MAX_IMPORT_BYTES + 1)


@pytest.mark.database
def test_oversized_import_is_refused_unread(
    client: Client, alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "MAX_IMPORT_BYTES", 100)

    def unread(self: Any, *args: Any) -> bytes:
        raise AssertionError("the upload was read")

    upload = SimpleUploadedFile("chat.json", b" " * 101, content_type="application/json")
    body = encode_multipart(BOUNDARY, {"file": upload})  # reads the upload: before read fails
    # Django hands the view one of these (small uploads in memory, large ones on disk).
    for cls in (InMemoryUploadedFile, TemporaryUploadedFile):
        monkeypatch.setattr(cls, "read", unread)
    response = client.post(reverse("chat:import"), body, content_type=MULTIPART, follow=True)
    assert response.status_code == 200
    assert "too large to import" in response.content.decode()
    assert not Conversation.objects.filter(user=alice).exists()


def test_import_chat_refuses_more_than_the_limit(alice: User) -> None:
    # import_chat still refuses more than MAX_IMPORT_BYTES, whatever size the upload claimed.
    with pytest.raises(InvalidRequest, match="too large"):
        transfer.import_chat(user=alice, raw=b" " * (transfer.MAX_IMPORT_BYTES + 1))
