"""A stand-in for an engine's server (vllm serve, sglang.launch_server, text-generation-launcher).

`install(folder, name, record)` writes an executable `folder/name` that runs `main(record)`: it appends
{"pid", "argv"} to `record` as one JSON line, serves GET /health (503 for its first 0.3 s, as a loading
server does), GET /v1/models and a fixed streamed POST /v1/completions on --port, and exits with code 3
on POST /die. A model named "crash" exits at once with a CUDA-like error; "hang" never becomes healthy.
"""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY_AFTER_S = 0.3


def install(folder: Path, name: str, record: Path) -> Path:
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        f"from tests.fake_engine_server import main\nmain({str(record)!r})\n"
    )
    path.chmod(0o755)
    return path


def _option(argv: list[str], *flags: str) -> str | None:
    for flag in flags:
        if flag in argv:
            return argv[argv.index(flag) + 1]
    return None


def main(record: str) -> None:
    argv = sys.argv[1:]
    with open(record, "a") as out:
        out.write(json.dumps({"pid": os.getpid(), "argv": argv}) + "\n")
    model = _option(argv, "--model-path", "--model-id") or (argv[1] if argv[:1] == ["serve"] else "")
    print(f"stand-in engine server for {model}", flush=True)
    if model == "crash":
        print("torch.OutOfMemoryError: CUDA out of memory", file=sys.stderr, flush=True)
        sys.exit(2)
    name = _option(argv, "--served-model-name") or model
    started = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _json(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                ready = model != "hang" and time.monotonic() - started > READY_AFTER_S
                self._json(200 if ready else 503, {})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": name, "max_model_len": 2048}]})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path == "/die":
                self._json(200, {})
                os._exit(3)
            if self.path != "/v1/completions":
                self._json(404, {"detail": "Not Found"})
                return
            events = [
                {"choices": [{"index": 0, "text": "Hi", "finish_reason": None}]},
                {"choices": [{"index": 0, "text": " there", "finish_reason": "length"}]},
                {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for event in events:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    port = int(_option(argv, "--port") or 0)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
