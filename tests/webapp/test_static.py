"""Static files (vendored htmx, CSS, theme script) are served by the ASGI app itself, with no CDN."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator

from webapp.asgi import application


async def _get(path: str) -> dict[str, Any]:
    """One GET through the whole ASGI app (HttpCommunicator trips on a file response's body-less end)."""
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "scheme": "http",
        "server": ("testserver", 80),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(10)
    body = b""
    while True:
        message = await communicator.receive_output(10)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(5)
    return {"status": start["status"], "headers": dict(start["headers"]), "body": body}


@pytest.mark.parametrize(
    ("path", "start", "content_type"),
    [
        ("/static/vendor/htmx.min.js", b"var htmx=", b"text/javascript"),
        ("/static/css/mooncake.css", b"/* Mooncake", b"text/css"),
        ("/static/js/theme.js", b"// Light/dark", b"text/javascript"),
    ],
)
async def test_static_files_are_served_through_asgi(path: str, start: bytes, content_type: bytes) -> None:
    response = await _get(path)
    assert response["status"] == 200
    assert response["body"].startswith(start)
    assert response["headers"][b"Content-Type"].startswith(content_type)


async def test_unknown_static_file_is_404() -> None:
    response = await _get("/static/nope.js")
    assert response["status"] == 404


def test_vendored_htmx_is_version_2() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "static" / "vendor" / "htmx.min.js").read_text()
    assert 'version:"2.' in text
