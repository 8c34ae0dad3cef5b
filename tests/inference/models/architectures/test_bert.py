"""Our BERT encoder and pooling against transformers' BertModel with sentence-transformers' pooling,
computed here: a tiny random checkpoint of the real structure, a padded batch of different lengths, fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

from inference.models.architectures.bert import BertArgs, BertEncoder
from inference.models.layers.pooling import Pooling, PoolingMode, pool, read_pooling

ROWS = [[2, 17, 33, 5, 9, 40, 3], [2, 8, 3], [2, 50, 61, 7, 3]]
TOLERANCE = 1e-5


def _checkpoint(folder: Path, *, mode: PoolingMode, normalize: bool) -> BertModel:
    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    reference = BertModel(config).eval()
    reference.save_pretrained(folder, safe_serialization=True)
    flags = {
        "mean": "pooling_mode_mean_tokens",
        "cls": "pooling_mode_cls_token",
        "last": "pooling_mode_lasttoken",
    }
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({flags[mode]: True, "word_embedding_dimension": 32})
    )
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
    (folder / "modules.json").write_text(json.dumps(modules))
    return reference


def _padded() -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(map(len, ROWS))
    ids = torch.zeros((len(ROWS), longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(ROWS):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def _reference_pooling(hidden: torch.Tensor, mask: torch.Tensor, mode: str, normalize: bool) -> torch.Tensor:
    """sentence-transformers' Pooling and Normalize modules, written out."""
    if mode == "mean":
        weights = mask.unsqueeze(-1).float()
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    elif mode == "cls":
        pooled = hidden[:, 0]
    else:
        pooled = hidden[torch.arange(hidden.shape[0]), mask.sum(1) - 1]
    return F.normalize(pooled, p=2, dim=1) if normalize else pooled


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("mode", ["mean", "cls", "last"])
def test_vectors_equal_transformers_bert_with_reference_pooling(
    tmp_path: Path, mode: PoolingMode, normalize: bool
) -> None:
    reference = _checkpoint(tmp_path, mode=mode, normalize=normalize)
    ours = BertEncoder(BertArgs.from_hf(json.loads((tmp_path / "config.json").read_text())))
    ours.load_safetensors(tmp_path)
    ours.eval()
    pooling = read_pooling(tmp_path)
    assert pooling == Pooling(mode, normalize)
    ids, mask = _padded()
    with torch.no_grad():
        expected = _reference_pooling(
            reference(input_ids=ids, attention_mask=mask).last_hidden_state, mask, mode, normalize
        )
        hidden = ours(ids, mask)
        got = pool(hidden, mask, pooling)
    assert got.shape == (len(ROWS), 32)
    torch.testing.assert_close(got, expected, atol=TOLERANCE, rtol=0)
    # Each row alone gives the same vector as in the padded batch: padding changes nothing.
    for i, row in enumerate(ROWS):
        alone = torch.tensor([row])
        with torch.no_grad():
            single = pool(ours(alone, torch.ones_like(alone)), torch.ones_like(alone), pooling)
        torch.testing.assert_close(single[0], got[i], atol=TOLERANCE, rtol=0)


def test_without_modules_json_pooling_is_mean_and_normalised(tmp_path: Path) -> None:
    assert read_pooling(tmp_path) == Pooling("mean", True)


def test_unsupported_pooling_and_a_module_outside_the_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ValueError, match="unsupported"):
        read_pooling(tmp_path)
    outside = [{"type": "sentence_transformers.models.Pooling", "path": "../elsewhere"}]
    (tmp_path / "modules.json").write_text(json.dumps(outside))
    with pytest.raises(ValueError, match="outside"):
        read_pooling(tmp_path)


def test_a_checkpoint_missing_or_with_extra_weights_is_refused(tmp_path: Path) -> None:
    _checkpoint(tmp_path, mode="mean", normalize=True)
    config = json.loads((tmp_path / "config.json").read_text())
    fewer_layers = BertEncoder(BertArgs.from_hf({**config, "num_hidden_layers": 1}))
    with pytest.raises(ValueError, match="no matching parameter"):
        fewer_layers.load_safetensors(tmp_path)
    more_layers = BertEncoder(BertArgs.from_hf({**config, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match="missing weights"):
        more_layers.load_safetensors(tmp_path)
