"""A model source's tokenizer and chat template without its weights, for an engine whose weights live
elsewhere (inference.frontends.remote.engine): prompts are templated and tokenized here, generated upstream.

Sources are those inference.models.loader.load takes ("default", a Hugging Face directory, a .gguf file),
except that a directory needs only its tokenizer files (tokenizer.json / tokenizer_config.json, config.json
optional): a web host in front of a large upstream model need not hold its weights. A GGUF's tokenizer is read
from the file's metadata; nothing is converted or cached."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoTokenizer, PretrainedConfig

from inference.cache_dir import DEFAULT_CACHE_DIR
from inference.models.gguf.convert import _HASH_MEMO as HASH_MEMO
from inference.models.loader.load import _eos_token_ids
from inference.models.loader.source import ModelSourceError, _confined, default_gguf_path

logger = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclass(slots=True)
class TokenizerSource:
    tokenizer: Any  # a transformers PreTrainedTokenizerBase
    eos_token_ids: set[int]
    context_length: int | None  # the model config's max_position_embeddings, when it has one


def load_tokenizer_source(
    source: str, *, model_roots: Sequence[str] | None = None, cache_dir: Path | None = None
) -> TokenizerSource:
    """The tokenizer, EOS ids and context length `source` describes; ModelSourceError if it has none."""
    path = _resolve(source, model_roots)
    converted = _converted(path, cache_dir or DEFAULT_CACHE_DIR) if path.is_file() else None
    if converted is not None:  # a native load converted it before: its folder reads ~50x faster
        kwargs: dict[str, Any] = {}
        folder = converted
    elif path.is_file():
        kwargs = {"gguf_file": path.name}
        folder = path.parent
    else:
        kwargs, folder = {}, path
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False, **kwargs)
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False, **kwargs)
    except (OSError, ValueError):  # a tokenizer-only folder: the upstream knows the rest
        logger.info(
            "No model config beside the tokenizer of %s; its context length comes from elsewhere", source
        )
        config = PretrainedConfig()
    context = getattr(config, "max_position_embeddings", None)
    return TokenizerSource(
        tokenizer=tokenizer,
        eos_token_ids=_eos_token_ids(config, tokenizer, folder),
        context_length=int(context) if isinstance(context, int) and context > 0 else None,
    )


def _converted(gguf: Path, cache_dir: Path) -> Path | None:
    """The folder inference.models.gguf.convert made from this file, if its hash memo still matches it."""
    gguf_cache = cache_dir / "gguf"
    try:
        memo = json.loads((gguf_cache / HASH_MEMO).read_text())
        entry = memo[str(gguf.resolve())]
        stat = gguf.stat()
        if entry["size"] != stat.st_size or entry["mtime_ns"] != stat.st_mtime_ns:
            return None
        folder = gguf_cache / str(entry["sha256"])[:32]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if (folder / "config.json").is_file() else None


def _resolve(source: str, model_roots: Sequence[str] | None) -> Path:
    path = default_gguf_path() if source == "default" else Path(source).expanduser()
    if not path.exists():
        raise ModelSourceError(
            f"model source {source!r} does not exist: an `openai` engine reads its tokenizer and chat "
            "template from 'default', a local model folder (tokenizer files suffice) or a .gguf file"
        )
    if source != "default" and model_roots is not None:
        path = _confined(path, model_roots)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelSourceError(
                f"{path.name}: expected a .gguf file or a model folder with tokenizer files"
            )
        return path
    if any((path / name).is_file() for name in _TOKENIZER_FILES):
        return path
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    raise ModelSourceError(f"{path} has no tokenizer files ({', '.join(_TOKENIZER_FILES)}) or single .gguf")
