"""The real huggingface_hub client against tests/hub_server.py: listing, downloads, cache, errors, gating."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from tests.hub_server import HubServer, bundled_model_repo, commit_sha, start_hub

REPO = "acme/tiny"
GATED = "acme/gated"
WEIGHTS_SIZE = 3 * 1024 * 1024 + 17  # a few MB, not a multiple of any chunk size


def _write_repo(root: Path) -> dict[str, bytes]:
    files = {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}).encode(),
        "tokenizer.json": b'{"version": "1.0"}',
        "README.md": b"# tiny\n",
        "nested/extra.json": b'{"x": 1}',
        "model.safetensors": os.urandom(WEIGHTS_SIZE),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


@pytest.fixture
def repo_files(tmp_path: Path) -> dict[str, bytes]:
    root = tmp_path / "repo"
    root.mkdir()
    return _write_repo(root)


@pytest.fixture
def hub(tmp_path: Path, repo_files: dict[str, bytes]) -> Iterator[HubServer]:
    gated_root = tmp_path / "gated"
    gated_root.mkdir()
    _write_repo(gated_root)
    with start_hub({REPO: tmp_path / "repo", GATED: gated_root}, gated={GATED}) as server:
        yield server


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_list_repo_files_and_model_info(hub: HubServer, repo_files: dict[str, bytes]) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    assert sorted(api.list_repo_files(REPO)) == sorted(repo_files)
    assert ("GET", f"/api/models/{REPO}/tree/main") in hub.requests

    info = api.model_info(REPO, files_metadata=True)
    assert info.id == REPO and info.sha == commit_sha(REPO) and not info.gated
    assert info.config == {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    siblings = {s.rfilename: s for s in info.siblings or []}
    assert sorted(siblings) == sorted(repo_files)
    weights = siblings["model.safetensors"]
    assert weights.size == WEIGHTS_SIZE and weights.lfs is not None
    assert weights.lfs.sha256 == hashlib.sha256(repo_files["model.safetensors"]).hexdigest()
    config = siblings["config.json"]
    assert config.lfs is None and config.size == len(repo_files["config.json"])
    assert api.model_info(GATED).gated == "manual"  # a gated repo's metadata is public, as on the hub


def test_snapshot_download_then_offline_from_the_cache(
    hub: HubServer, repo_files: dict[str, bytes], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    folder = snapshot_download(
        REPO, endpoint=hub.url, allow_patterns=["*.json", "*.safetensors"], cache_dir=cache, token=False
    )
    wanted = {name: data for name, data in repo_files.items() if not name.endswith(".md")}
    assert _tree_bytes(Path(folder)) == wanted
    assert Path(folder).name == commit_sha(REPO)
    # Cache blobs are named by ETag: the git blob sha1 for plain files, the sha256 for LFS ones.
    weights_blob = (Path(folder) / "model.safetensors").resolve()
    assert weights_blob.name == hashlib.sha256(repo_files["model.safetensors"]).hexdigest()
    # The weights came through the CDN redirect, the rest straight from resolve.
    assert ("HEAD", f"/{REPO}/resolve/{commit_sha(REPO)}/model.safetensors") in hub.requests
    assert any(method == "GET" and path.startswith("/cdn/") for method, path in hub.requests)

    hub.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{hub.url}/api/models", timeout=5)
    with pytest.raises(httpx2.TransportError):  # the client's pooled keep-alive connections are cut too
        HfApi(endpoint=hub.url, token=False).model_info(REPO)
    offline = snapshot_download(
        REPO, allow_patterns=["*.json", "*.safetensors"], cache_dir=cache, local_files_only=True
    )
    assert offline == folder and _tree_bytes(Path(offline)) == wanted


def test_unknown_repo_is_not_found(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(RepositoryNotFoundError) as listing:
        HfApi(endpoint=hub.url, token=False).list_repo_files("acme/missing")
    with pytest.raises(RepositoryNotFoundError) as download:
        hf_hub_download("acme/missing", "config.json", endpoint=hub.url, cache_dir=tmp_path, token=False)
    for error in (listing.value, download.value):
        assert not isinstance(error, GatedRepoError)  # GatedRepoError subclasses RepositoryNotFoundError
        assert error.response.status_code == 404


def test_gated_repo_needs_the_token(hub: HubServer, repo_files: dict[str, bytes], tmp_path: Path) -> None:
    with pytest.raises(GatedRepoError) as anonymous:
        hf_hub_download(GATED, "config.json", endpoint=hub.url, cache_dir=tmp_path / "a", token=False)
    assert anonymous.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as wrong:
        snapshot_download(GATED, endpoint=hub.url, cache_dir=tmp_path / "b", token="hf_not_the_token")
    assert wrong.value.response.status_code == 403

    folder = snapshot_download(GATED, endpoint=hub.url, cache_dir=tmp_path / "c", token=hub.token)
    assert _tree_bytes(Path(folder)).keys() == repo_files.keys()
    # The client drops the token on the CDN's origin and the CDN still serves: the signed-url behaviour.
    weights = hf_hub_download(
        GATED, "model.safetensors", endpoint=hub.url, local_dir=tmp_path / "d", token=hub.token
    )
    assert Path(weights).stat().st_size == WEIGHTS_SIZE


def test_hf_hub_download_into_local_dir(hub: HubServer, repo_files: dict[str, bytes], tmp_path: Path) -> None:
    local = tmp_path / "local"
    for name in ("config.json", "nested/extra.json", "model.safetensors"):
        path = hf_hub_download(REPO, name, endpoint=hub.url, local_dir=local, token=False)
        assert Path(path) == local / name and Path(path).read_bytes() == repo_files[name]
    # A second call with the file in place only asks for metadata.
    before = len(hub.requests)
    hf_hub_download(REPO, "config.json", endpoint=hub.url, local_dir=local, token=False)
    assert [method for method, _ in hub.requests[before:]] == ["HEAD"]


def test_default_cache_download_and_missing_file(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub.errors import EntryNotFoundError

    path = hf_hub_download(REPO, "tokenizer.json", endpoint=hub.url, cache_dir=tmp_path, token=False)
    assert Path(path).read_bytes() == b'{"version": "1.0"}'
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "absent.json", endpoint=hub.url, cache_dir=tmp_path, token=False)


def test_range_requests_resume(hub: HubServer, repo_files: dict[str, bytes]) -> None:
    url = f"{hub.url}/{REPO}/resolve/main/config.json"
    data = repo_files["config.json"]
    request = urllib.request.Request(url, headers={"Range": "bytes=5-"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 206 and response.read() == data[5:]
        assert response.headers["Content-Range"] == f"bytes 5-{len(data) - 1}/{len(data)}"
    with pytest.raises(urllib.error.HTTPError) as unsatisfiable:
        urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=9999-"}), timeout=5)
    assert unsatisfiable.value.code == 416


def test_bundled_model_repo(tmp_path: Path) -> None:
    from safetensors import safe_open

    folder = bundled_model_repo(tmp_path / "bundled")
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not any(p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".gguf") for p in folder.iterdir())
    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
        assert "model.embed_tokens.weight" in set(weights.keys())

    # Served as a hub repo, its config and tokenizer load with transformers from the download.
    from transformers import AutoConfig, AutoTokenizer

    with start_hub({"mooncake/bundled": folder}) as hub:
        snapshot = snapshot_download(
            "mooncake/bundled",
            endpoint=hub.url,
            allow_patterns=["*.json", "*.jinja"],
            cache_dir=tmp_path / "cache",
            token=False,
        )
    assert AutoConfig.from_pretrained(snapshot).model_type == "llama"
    assert AutoTokenizer.from_pretrained(snapshot)("hello").input_ids
