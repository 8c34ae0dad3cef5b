"""The models page's GGUF upload: chunks appended at their offsets to a part file, resumed from what the
server has, bounded in size, named safely, checked as a GGUF of ours, then moved into the root and
registered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from gguf import GGUFWriter

from inference import ModelManager
from webapp.console import uploads
from webapp.console.models import AuditLog
from webapp.core.body_limits import body_limit
from webapp.core.models import ModelRegistration


def write_gguf(path: Path, arch: str = "llama") -> bytes:
    """A small GGUF our reader parses (header, metadata, one tensor); its bytes."""
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(64 * 32, dtype=np.float32).reshape(64, 32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def start(client: Client, name: str, size: int) -> Any:
    return client.post(reverse("console:model-upload-start"), {"name": name, "size": size})


def put(client: Client, name: str, offset: int, data: bytes) -> Any:
    url = reverse("console:model-upload-chunk", args=[name]) + f"?offset={offset}"
    return client.put(url, data=data, content_type="application/octet-stream")


def finish(client: Client, name: str) -> Any:
    return client.post(reverse("console:model-upload-finish", args=[name]))


@pytest.fixture
def tiny(tmp_path: Path) -> bytes:
    return write_gguf(tmp_path / "made.gguf")


def test_the_upload_endpoints_take_one_chunk_per_request() -> None:
    assert reverse("console:model-upload-start") == uploads.UPLOADS_PATH
    chunk_url = reverse("console:model-upload-chunk", args=["m.gguf"])
    assert body_limit(chunk_url) == uploads.CHUNK_BYTES


@pytest.mark.database
def test_upload_in_chunks_then_resume_then_register(
    staff_client: Client, model_root: Path, manager: ModelManager, tiny: bytes, settings: Any
) -> None:
    settings.MOONCAKE_MODEL_UPLOAD_MAX_BYTES = 1 << 20
    first = start(staff_client, "My Model (Q4).gguf", len(tiny))
    assert first.status_code == 200
    name = first.json()["name"]
    assert name == "My-Model--Q4.gguf" and first.json()["offset"] == 0
    half = len(tiny) // 2
    assert put(staff_client, name, 0, tiny[:half]).json()["offset"] == half
    # The page is reloaded and the same file picked again: the server says where to go on from.
    again = start(staff_client, "My Model (Q4).gguf", len(tiny))
    assert again.json()["offset"] == half
    stale = put(staff_client, name, 0, tiny[:half])  # a retried first chunk is refused, not appended twice
    assert stale.status_code == 409 and stale.json()["offset"] == half
    assert put(staff_client, name, half, tiny[half:]).json()["offset"] == len(tiny)
    part = model_root / ".uploads" / f"{name}.part"
    assert part.read_bytes() == tiny

    done = finish(staff_client, name)
    assert done.status_code == 200, done.content
    assert (model_root / name).read_bytes() == tiny and not part.exists()
    row = ModelRegistration.objects.get(name=done.json()["registered"])
    assert row.name == "My-Model--Q4" and row.source == str((model_root / name).resolve())
    assert row.name in {info.name for info in manager.list()}
    assert {"model.upload", "model.register"} <= set(AuditLog.objects.values_list("action", flat=True))
    # Nothing is left to offer in the list of unregistered files.
    assert name not in staff_client.get(reverse("console:models")).content.decode().split("model-files")[-1]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("../../etc/evil.gguf", "may not contain"),
        ("dir\\evil.gguf", "may not contain"),
        ("weights.bin", "not a .gguf file"),
        (".gguf", "no name"),
        ("", "required"),
    ],
)
def test_bad_names_are_refused(staff_client: Client, model_root: Path, raw: str, problem: str) -> None:
    response = start(staff_client, raw, 100)
    assert response.status_code == 400 and problem in response.json()["error"]
    assert not any(model_root.rglob("*.part"))


def test_unicode_names_are_normalized() -> None:
    fullwidth = "\uff53\uff4d\uff4f\uff4c \uff4d\uff4f\uff44\uff45\uff4c.GGUF"  # "smol model.GGUF"
    assert uploads.upload_name(fullwidth) == "smol-model.gguf"  # NFKC, then the safe set


def test_size_over_the_bound_is_refused(staff_client: Client, model_root: Path, settings: Any) -> None:
    settings.MOONCAKE_MODEL_UPLOAD_MAX_BYTES = 1000
    response = start(staff_client, "big.gguf", 1001)
    assert response.status_code == 400 and "at most 1000 bytes" in response.json()["error"]


def test_more_than_the_disk_holds_is_refused(staff_client: Client, model_root: Path, settings: Any) -> None:
    settings.MOONCAKE_MODEL_UPLOAD_MAX_BYTES = 1 << 62
    response = start(staff_client, "huge.gguf", 1 << 60)  # an exbibyte: no test machine has the room
    assert response.status_code == 400 and "Not enough disk space" in response.json()["error"]
    assert not any((model_root / ".uploads").iterdir())  # refused before anything was written


def test_chunks_past_the_declared_size_or_over_the_limit_are_refused(
    staff_client: Client, model_root: Path
) -> None:
    start(staff_client, "m.gguf", 10)
    assert put(staff_client, "m.gguf", 0, b"x" * 11).status_code == 400
    over = put(staff_client, "m.gguf", 0, b"x" * (uploads.CHUNK_BYTES + 1))
    assert over.status_code == 413  # the body limit refuses it before the view reads a byte
    assert put(staff_client, "never-started.gguf", 0, b"x").status_code == 400
    assert staff_client.put(reverse("console:model-upload-chunk", args=["m.gguf"]), b"x").status_code == 400


@pytest.mark.database
def test_not_a_gguf_is_refused_and_discarded(staff_client: Client, model_root: Path, manager: Any) -> None:
    data = b"this is plain text, not a model" * 10
    start(staff_client, "fake.gguf", len(data))
    put(staff_client, "fake.gguf", 0, data)
    response = finish(staff_client, "fake.gguf")
    assert response.status_code == 400 and "fake.gguf is not a GGUF file" in response.json()["error"]
    assert not (model_root / "fake.gguf").exists() and not any((model_root / ".uploads").iterdir())
    assert not ModelRegistration.objects.exists()


@pytest.mark.database
def test_an_unsupported_architecture_is_refused(
    staff_client: Client, model_root: Path, tmp_path: Path, manager: Any
) -> None:
    data = write_gguf(tmp_path / "x.gguf", arch="mamba")
    start(staff_client, "mamba.gguf", len(data))
    put(staff_client, "mamba.gguf", 0, data)
    response = finish(staff_client, "mamba.gguf")
    assert response.status_code == 400 and "'mamba' is not supported" in response.json()["error"]


def test_an_incomplete_upload_is_not_finished(staff_client: Client, model_root: Path, tiny: bytes) -> None:
    start(staff_client, "m.gguf", len(tiny))
    put(staff_client, "m.gguf", 0, tiny[:100])
    response = finish(staff_client, "m.gguf")
    assert response.status_code == 400 and f"100 of {len(tiny)} bytes" in response.json()["error"]


def test_another_size_starts_over_and_discard_removes_the_part(
    staff_client: Client, model_root: Path
) -> None:
    start(staff_client, "m.gguf", 10)
    put(staff_client, "m.gguf", 0, b"12345")
    assert start(staff_client, "m.gguf", 20).json()["offset"] == 0  # another file of the same name
    assert staff_client.post(reverse("console:model-upload-discard", args=["m.gguf"])).json() == {
        "discarded": True
    }
    assert not any((model_root / ".uploads").iterdir())


def test_a_name_already_in_the_folder_is_refused(staff_client: Client, model_root: Path) -> None:
    (model_root / "m.gguf").write_bytes(b"GGUF")
    response = start(staff_client, "m.gguf", 10)
    assert response.status_code == 400 and "already in the models folder" in response.json()["error"]


def test_only_staff_upload_and_csrf_is_checked(plain: Any, staff: Any, model_root: Path) -> None:
    client = Client()
    client.force_login(plain)
    assert start(client, "m.gguf", 10).status_code == 403
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(staff)
    assert start(guarded, "m.gguf", 10).status_code == 403
    assert put(guarded, "m.gguf", 0, b"x").status_code == 403


@pytest.mark.database
def test_the_page_offers_the_upload_form(staff_client: Client, model_root: Path, manager: Any) -> None:
    page = staff_client.get(reverse("console:models")).content.decode()
    assert 'id="model-upload"' in page and f'data-start-url="{uploads.UPLOADS_PATH}"' in page
    assert "console/upload.js" in page and "<script>" not in page and "style=" not in page


def test_meta_note_is_plain_json(staff_client: Client, model_root: Path) -> None:
    start(staff_client, "m.gguf", 10)
    assert json.loads((model_root / ".uploads" / "m.gguf.json").read_text()) == {"size": 10}


def test_an_abandoned_upload_is_deleted_and_a_fresh_one_kept(staff_client: Client, model_root: Path) -> None:
    import os
    import time

    start(staff_client, "old.gguf", 10)
    put(staff_client, "old.gguf", 0, b"12345")
    start(staff_client, "fresh.gguf", 10)
    put(staff_client, "fresh.gguf", 0, b"123")
    folder = model_root / ".uploads"
    (folder / "orphan.gguf.json").write_text('{"size": 3}')  # a size note whose part is gone
    stale = time.time() - uploads.ABANDONED_AFTER_S - 60
    os.utime(folder / "old.gguf.part", (stale, stale))
    # Any new upload prunes first, so what the abandoned one held counts as free disk again.
    assert start(staff_client, "new.gguf", 10).status_code == 200
    assert sorted(p.name for p in folder.iterdir()) == [
        "fresh.gguf.json", "fresh.gguf.part", "new.gguf.json", "new.gguf.part",
    ]  # fmt: skip
    assert start(staff_client, "fresh.gguf", 10).json()["offset"] == 3  # the fresh one still resumes
    later = time.time() + uploads.ABANDONED_AFTER_S + 60
    assert sorted(uploads.uploads_prune(now=later)) == ["fresh.gguf", "new.gguf"]
    assert not any(folder.iterdir())


def test_the_server_start_prunes_abandoned_uploads(model_root: Path) -> None:
    import os
    import time

    from webapp.console.startup import prepare_model_root

    folder = model_root / ".uploads"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gone.gguf.part").write_bytes(b"x")
    (folder / "gone.gguf.json").write_text('{"size": 2}')
    stale = time.time() - uploads.ABANDONED_AFTER_S - 60
    os.utime(folder / "gone.gguf.part", (stale, stale))
    prepare_model_root()
    assert not any(folder.iterdir())
