"""A stand-in for the Hugging Face Hub at the HTTP boundary the real `huggingface_hub` client uses.

Tests point the real client at a loopback server that serves local folders as hub repositories, so no
code or test reaches huggingface.co:

    with start_hub({"org/name": folder}) as hub:
        HfApi(endpoint=hub.url).list_repo_files("org/name")
        hf_hub_download("org/name", "config.json", endpoint=hub.url, cache_dir=tmp)

Routes are the ones huggingface_hub 2.x requests (read from its file_download.py, _snapshot_download.py
and hf_api.py), answered with the headers it reads:

- GET /api/models                                   model listing (a cheap reachability probe)
- GET /api/models/{org}/{name}[/revision/{rev}]     model_info / repo_info: sha, gated, siblings
                                                    (`blobs=1` adds sizes, blob ids and LFS sha256)
- GET /api/models/{org}/{name}/tree/{rev}[/{dir}]   list_repo_tree / list_repo_files (`recursive`)
- HEAD|GET /{org}/{name}/resolve/{rev}/{file}       file metadata and content: X-Repo-Commit, ETag (the
                                                    git blob sha1), Content-Length, Range -> 206
- LFS files (weights, anything over 10 MiB) answer resolve with a 302 carrying X-Linked-Etag (sha256) and
  X-Linked-Size, to a second listener standing in for the hub's CDN. It is another origin, so the client
  neither follows the redirect on HEAD nor sends the Authorization header there, as with the real hub.

Errors carry the X-Error-Code header (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound) that the
client's `hf_raise_for_status` turns into RepositoryNotFoundError, GatedRepoError and so on. Revision
"main" and each repo's fixed fake commit sha (derived from its id) are served; nothing is ever written.

`bundled_model_repo(dest)` builds a hub-shaped folder from the project's bundled default model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent

HUB_TOKEN = "hf_mooncake_test_token"  # the token gated repos accept unless start_hub is given another
# What the hub's default .gitattributes routes through LFS; the hub also refuses plain git files over 10 MB.
LFS_SUFFIXES = frozenset(
    {".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".msgpack", ".model", ".zip"}
)
LFS_MIN_SIZE = 10 * 1024 * 1024
_LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
_CREATED_AT = "2024-01-01T00:00:00.000Z"


def commit_sha(repo_id: str) -> str:
    """The fake commit `main` points at: 40 hex digits, stable per repo id."""
    return hashlib.sha1(f"commit {repo_id}".encode()).hexdigest()


def _git_blob_sha1(data: bytes) -> str:
    # Git's object id for a blob: what the hub reports as a plain file's oid and ETag.
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class _FileInfo:
    path: Path
    size: int
    blob_id: str  # git blob sha1 (of the LFS pointer for LFS files)
    sha256: str | None  # set for LFS files only, as on the hub
    pointer_size: int | None

    def tree_entry(self, rel: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "oid": self.blob_id, "size": self.size, "path": rel}
        if self.sha256 is not None:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry

    def sibling(self, rel: str, *, blobs: bool) -> dict[str, Any]:
        sibling: dict[str, Any] = {"rfilename": rel}
        if blobs:  # model_info(files_metadata=True) asks for these; the plain call gets names only
            sibling.update(size=self.size, blobId=self.blob_id)
            if self.sha256 is not None:
                sibling["lfs"] = {"size": self.size, "sha256": self.sha256, "pointerSize": self.pointer_size}
        return sibling


def _is_lfs(path: Path, size: int) -> bool:
    return path.suffix.lower() in LFS_SUFFIXES or size >= LFS_MIN_SIZE


@dataclass
class _Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: Path | None = None  # streamed instead of body: the whole file or `span`
    span: tuple[int, int] | None = None  # (first byte, length)


class _HubState:
    """What both listeners share: the repos, the request log and a memo of file hashes."""

    def __init__(self, repos: Mapping[str, Path], gated: frozenset[str], token: str) -> None:
        self.repos = dict(repos)
        self.gated = gated
        self.token = token
        self.requests: list[tuple[str, str]] = []
        self.cdn_url = ""
        self._lock = threading.Lock()
        self._infos: dict[tuple[Path, int, int], _FileInfo] = {}
        self._cdn_blobs: dict[str, Path] = {}

    def log(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def files(self, repo_id: str) -> dict[str, Path]:
        """The repo's files by repo path, read from its folder now: a test may add files after start."""
        root = self.repos[repo_id]
        return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}

    def info(self, path: Path) -> _FileInfo:
        stat = path.stat()
        key = (path, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            cached = self._infos.get(key)
        if cached is not None:
            return cached
        data = path.read_bytes()
        if _is_lfs(path, len(data)):
            sha256 = hashlib.sha256(data).hexdigest()
            pointer = _LFS_POINTER.format(sha256=sha256, size=len(data)).encode()
            info = _FileInfo(path, len(data), _git_blob_sha1(pointer), sha256, len(pointer))
        else:
            info = _FileInfo(path, len(data), _git_blob_sha1(data), None, None)
        with self._lock:
            self._infos[key] = info
        return info

    # ---- routing ---------------------------------------------------------------------------------------

    def route(
        self, segments: list[str], query: dict[str, list[str]], headers: Mapping[str, str]
    ) -> _Response:
        match segments:
            case ["api", "models"]:
                return self._listing(query)
            case ["api", "models", org, name]:
                return self._model_info(f"{org}/{name}", None, query)
            case ["api", "models", org, name, "revision", revision]:
                return self._model_info(f"{org}/{name}", revision, query)
            case ["api", "models", org, name, "tree", revision, *folder]:
                return self._tree(f"{org}/{name}", revision, "/".join(folder), query)
            case [org, name, "resolve", revision, *filename] if filename:
                return self._resolve(f"{org}/{name}", revision, "/".join(filename), headers)
        return _error(404, None, "Not Found")

    def route_cdn(self, segments: list[str], headers: Mapping[str, str]) -> _Response:
        # Stands in for a signed CDN url: only blobs a resolve redirect handed out are served, with no auth.
        if len(segments) == 2 and segments[0] == "cdn":
            with self._lock:
                path = self._cdn_blobs.get(segments[1])
            if path is not None:
                return _file_response(path, path.stat().st_size, headers.get("range"), {})
        return _error(403, None, "Access Denied")

    def _repo_error(self, repo_id: str, revision: str | None) -> _Response | None:
        if repo_id not in self.repos:
            # The real hub answers 401 to anonymous callers; the client keys on the error code either way.
            return _error(404, "RepoNotFound", "Repository not found")
        if revision is not None and revision not in ("main", commit_sha(repo_id)):
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return None

    def _listing(self, query: dict[str, list[str]]) -> _Response:
        search = query.get("search", [""])[0]
        limit = int(query.get("limit", ["1000"])[0])
        ids = [repo_id for repo_id in sorted(self.repos) if search in repo_id][:limit]
        return _json([self._summary(repo_id) for repo_id in ids])

    def _summary(self, repo_id: str) -> dict[str, Any]:
        return {
            "_id": commit_sha(repo_id)[:24],
            "id": repo_id,
            "modelId": repo_id,
            "likes": 0,
            "downloads": 0,
            "private": False,
            "tags": [],
            "createdAt": _CREATED_AT,
        }

    def _model_info(self, repo_id: str, revision: str | None, query: dict[str, list[str]]) -> _Response:
        error = self._repo_error(repo_id, revision)
        if error is not None:
            return error
        # Like the hub, a gated repo's metadata and file list are public; only file contents need access.
        files = self.files(repo_id)
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        info: dict[str, Any] = {
            **self._summary(repo_id),
            "author": repo_id.split("/")[0],
            "sha": commit_sha(repo_id),
            "lastModified": _CREATED_AT,
            "gated": "manual" if repo_id in self.gated else False,
            "disabled": False,
            "siblings": [self.info(path).sibling(rel, blobs=blobs) for rel, path in files.items()],
        }
        config = _read_json(files.get("config.json"))
        if config is not None:
            info["library_name"] = "transformers"
            info["config"] = {k: config[k] for k in ("architectures", "model_type") if k in config}
        return _json(info)

    def _tree(self, repo_id: str, revision: str, folder: str, query: dict[str, list[str]]) -> _Response:
        error = self._repo_error(repo_id, revision)
        if error is not None:
            return error
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
        entries: dict[str, dict[str, Any]] = {}
        for rel, path in self.files(repo_id).items():
            if not rel.startswith(prefix):
                continue
            parts = rel[len(prefix) :].split("/")
            # Every folder between `folder` and the file (only the first level unless recursive).
            for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
                sub = prefix + "/".join(parts[:depth])
                oid = hashlib.sha1(f"tree {repo_id}/{sub}".encode()).hexdigest()
                entries.setdefault(sub, {"type": "directory", "oid": oid, "size": 0, "path": sub})
            if recursive or len(parts) == 1:
                entries[rel] = self.info(path).tree_entry(rel)
        if prefix and not entries:
            return _error(404, "EntryNotFound", f'{folder} does not exist on "{revision}"', repo_id)
        return _json(list(entries.values()))

    def _resolve(self, repo_id: str, revision: str, filename: str, headers: Mapping[str, str]) -> _Response:
        error = self._repo_error(repo_id, revision)
        if error is not None:
            return error
        if repo_id in self.gated:
            authorization = headers.get("authorization", "")
            if not authorization:
                return _error(
                    401,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in.",
                    repo_id,
                )
            if authorization != f"Bearer {self.token}":
                return _error(
                    403,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                    f"Visit https://huggingface.co/{repo_id} to ask for access.",
                    repo_id,
                )
        path = self.files(repo_id).get(filename)
        if path is None:
            return _error(404, "EntryNotFound", "Entry not found", repo_id)
        info = self.info(path)
        meta = {"X-Repo-Commit": commit_sha(repo_id)}
        if info.sha256 is None:
            return _file_response(
                path, info.size, headers.get("range"), {**meta, "ETag": f'"{info.blob_id}"'}
            )
        with self._lock:
            self._cdn_blobs[info.sha256] = path
        return _Response(
            302,
            {
                **meta,
                "ETag": f'"{info.blob_id}"',
                "X-Linked-Etag": f'"{info.sha256}"',
                "X-Linked-Size": str(info.size),
                "Location": f"{self.cdn_url}/cdn/{info.sha256}?filename={quote(path.name)}",
            },
        )


def _json(payload: object) -> _Response:
    return _Response(200, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(payload).encode())


def _error(status: int, code: str | None, message: str, repo_id: str | None = None) -> _Response:
    headers = {"Content-Type": "application/json; charset=utf-8", "X-Error-Message": message}
    if code is not None:
        headers["X-Error-Code"] = code
    if repo_id is not None and code == "EntryNotFound":
        headers["X-Repo-Commit"] = commit_sha(repo_id)  # lets the client cache the file's absence
    return _Response(status, headers, json.dumps({"error": message}).encode())


def _read_json(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _file_response(path: Path, size: int, range_header: str | None, headers: dict[str, str]) -> _Response:
    """200 with the whole file, or 206 with one `Range: bytes=` span (resumed downloads send `bytes=N-`)."""
    headers = {**headers, "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
    span = _parse_range(range_header, size) if range_header else None
    if isinstance(span, str):  # "unsatisfiable"
        return _Response(416, {**headers, "Content-Range": f"bytes */{size}"})
    if span is None:
        return _Response(200, headers, file=path, span=(0, size))
    start, length = span
    headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
    return _Response(206, headers, file=path, span=span)


def _parse_range(header: str, size: int) -> tuple[int, int] | str | None:
    """(first byte, length), "unsatisfiable", or None to send the whole file (several or odd ranges)."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if not first:  # "bytes=-N": the last N bytes
            length = min(int(last), size)
            return (size - length, length) if length > 0 else "unsatisfiable"
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "unsatisfiable"
    return (start, end - start + 1)


class _HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: _HubState, *, cdn: bool) -> None:
        super().__init__(address, _Handler)
        self.state = state
        self.cdn = cdn
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def close_connections(self) -> None:
        # shutdown() only stops accepting; idle keep-alive connections would go on being served.
        with self.connections_lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):  # already closed by the client
                    connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    timeout = 30  # an idle kept-alive connection ends its thread eventually
    server: _HubHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is `HubServer.requests`

    def _answer(self, *, head: bool) -> None:
        url = urlsplit(self.path)
        state = self.server.state
        state.log(self.command, url.path)
        # Split before unquoting: the client sends the revision with "/" quoted as %2F.
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        headers = {name.lower(): value for name, value in self.headers.items()}  # names are case-blind
        if self.server.cdn:
            response = state.route_cdn(segments, headers)
        else:
            response = state.route(segments, parse_qs(url.query), headers)
        length = response.span[1] if response.file is not None and response.span else len(response.body)
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if head:
            return
        try:
            if response.file is not None and response.span is not None:
                with response.file.open("rb") as f:
                    self.connection.sendfile(f, offset=response.span[0], count=response.span[1])
            else:
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up mid-body (an aborted download)


class HubServer:
    """A running stand-in hub: `url` is the endpoint to hand the client; `requests` logs (method, path)."""

    def __init__(self, state: _HubState, hub: _HubHTTPServer, cdn: _HubHTTPServer) -> None:
        self._state = state
        self._servers = (hub, cdn)
        self.url = _url(hub)
        self.cdn_url = _url(cdn)
        self.token = state.token
        self.requests = state.requests
        self._threads = [
            # A short poll interval: shutdown() waits up to one interval, and tests stop a server each.
            threading.Thread(target=server.serve_forever, args=(0.05,), name=f"hub-server-{i}", daemon=True)
            for i, server in enumerate(self._servers)
        ]
        for thread in self._threads:
            thread.start()

    def commit_sha(self, repo_id: str) -> str:
        return commit_sha(repo_id)

    def stop(self) -> None:
        """Stop both listeners and drop open connections: afterwards a client's connection is refused."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
            server.close_connections()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _url(server: _HubHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host if isinstance(host, str) else host.decode()}:{port}"


def start_hub(
    repos: Mapping[str, Path],
    *,
    host: str = "127.0.0.1",
    gated: Iterable[str] = (),
    token: str = HUB_TOKEN,
) -> HubServer:
    """Serve each folder in `repos` as the hub model repo named by its key ("org/name") on a free port.

    Repos in `gated` refuse file downloads (401, or 403 for another token) unless the request carries
    `Authorization: Bearer <token>`, as the hub does for a gated repo whose access was not granted.
    """
    for repo_id, folder in repos.items():
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise ValueError(f"repo id {repo_id!r}: expected 'org/name'")
        if not Path(folder).is_dir():
            raise ValueError(f"repo {repo_id!r}: {folder} is not a directory")
    gated_ids = frozenset(gated)
    if not gated_ids <= repos.keys():
        raise ValueError(f"gated repos not in repos: {sorted(gated_ids - repos.keys())}")
    state = _HubState({repo_id: Path(folder) for repo_id, folder in repos.items()}, gated_ids, token)
    hub = _HubHTTPServer((host, 0), state, cdn=False)
    cdn = _HubHTTPServer((host, 0), state, cdn=True)
    state.cdn_url = _url(cdn)
    return HubServer(state, hub, cdn)


# ---- the bundled default model as a hub repository --------------------------------------------------------

_HUB_SUFFIXES = frozenset({".json", ".jinja", ".txt", ".safetensors"})
_NOT_HUB_FILES = frozenset({"mooncake-source.json"})  # the converter's own bookkeeping


def bundled_model_repo(dest: Path, *, cache_dir: Path | None = None) -> Path:
    """Fill `dest` with a hub-shaped copy of the bundled default model and return it.

    The engine's GGUF converter produces (or reuses, from the conversion cache: `cache_dir`, else
    MOONCAKE_CACHE_DIR, else ./var/cache of this checkout) a Hugging Face folder; its config, generation
    config when there is one, tokenizer files and model.safetensors are copied, never pickles. Copied, not
    hardlinked: the cache's files are loaded as trusted weights, and a test writing into `dest` must not
    change them.
    """
    from inference.cache_dir import ensure_private_dir
    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.source import resolve_source

    cache = cache_dir or Path(os.environ.get("MOONCAKE_CACHE_DIR") or REPO_ROOT / "var" / "cache")
    converted = ensure_converted(resolve_source("default"), ensure_private_dir(cache))
    dest.mkdir(parents=True, exist_ok=True)
    for source in sorted(converted.iterdir()):
        if source.is_file() and source.suffix in _HUB_SUFFIXES and source.name not in _NOT_HUB_FILES:
            shutil.copyfile(source, dest / source.name)
    return dest
