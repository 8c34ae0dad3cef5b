"""inference.models.gguf.reader reads what gguf-py writes and reads: every metadata type, each tensor's
data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize

from inference.models.gguf.reader import GGUFFile, GGUFFormatError
from inference.models.loader.source import resolve_source


def _write(path: Path, *, alignment: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    writer = GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_uint32("test.u32", 4_000_000_000)
    writer.add_int32("test.i32", -5)
    writer.add_float32("test.f32", 0.25)
    writer.add_uint64("test.u64", 2**40)
    writer.add_int64("test.i64", -(2**40))
    writer.add_float64("test.f64", 1e-300)
    writer.add_bool("test.bool", True)
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 60_000)
    writer.add_int16("test.i16", -30_000)
    writer.add_string("test.string", "héllo, wörld")
    writer.add_array("test.strings", ["", "a", "ünï", "long " * 50])
    writer.add_array("test.ints", [3, -1, 7])
    writer.add_array("test.floats", [0.5, 1.5])
    tensors = {
        "f32.weight": rng.standard_normal((3, 5)).astype(np.float32),
        "f16.weight": rng.standard_normal((4, 64)).astype(np.float16),
        "vector.bias": rng.standard_normal(7).astype(np.float32),
    }
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    dense = rng.standard_normal((6, 64)).astype(np.float32)
    for kind in (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q8_0):
        packed = quantize(dense, kind)
        writer.add_tensor(f"{kind.name}.weight", packed, raw_shape=packed.shape, raw_dtype=kind)
        tensors[f"{kind.name}.weight"] = packed
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors


def _same_as_gguf_py(path: Path) -> GGUFFile:
    ours, theirs = GGUFFile(path), GGUFReader(path)
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue  # gguf-py's own view of the header, not metadata
        expected, got = field.contents(), ours.fields[key]
        if isinstance(got, np.ndarray):
            assert got.tolist() == list(expected), key
        else:
            assert got == expected, key
    assert len(ours.fields) == len([k for k in theirs.fields if not k.startswith("GGUF.")])
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, reference in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.ggml_type == reference.tensor_type
        assert mine.n_elements == int(reference.n_elements)
        assert mine.data.shape == reference.data.shape and mine.data.dtype == reference.data.dtype
        assert np.array_equal(np.asarray(mine.data), np.asarray(reference.data)), mine.name
    return ours


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_value_type_and_tensor_reads_as_gguf_py_reads_it(tmp_path: Path, alignment: int | None) -> None:
    path = tmp_path / "all.gguf"
    written = _write(path, alignment=alignment)
    ours = _same_as_gguf_py(path)
    assert ours.architecture == "llama"
    assert ours.field("test.string") == "héllo, wörld"
    assert ours.field("test.strings") == ["", "a", "ünï", "long " * 50]
    assert ours.field("test.u64") == 2**40 and ours.field("test.bool") is True
    assert ours.field("missing", 3) == 3
    for name, value in written.items():
        found = ours.tensor(name)
        assert found is not None
        assert np.array_equal(np.asarray(found.data), value), name
    q4 = ours.tensor("Q4_0.weight")
    assert q4 is not None and q4.type_name == "Q4_0" and q4.dims == (64, 6)
    assert q4.data.shape == (6, 2 * 18)  # two blocks of 18 bytes per row
    if alignment is not None:
        assert all(t.offset % alignment == 0 for t in ours.tensors)


def test_the_bundled_model_reads_as_gguf_py_reads_it() -> None:
    ours = _same_as_gguf_py(resolve_source("default"))
    assert ours.architecture == "llama"
    assert len(ours.field("tokenizer.ggml.tokens")) == 49152


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(64))
    with pytest.raises(GGUFFormatError, match="not a GGUF"):
        GGUFFile(path)


def test_an_unsupported_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + (9).to_bytes(4, "little") + bytes(16))
    with pytest.raises(GGUFFormatError, match="version 9"):
        GGUFFile(path)


@pytest.mark.parametrize("where", ["metadata", "tensor table", "last tensor"])
def test_a_truncated_file_is_refused(tmp_path: Path, where: str) -> None:
    whole = tmp_path / "whole.gguf"
    _write(whole)
    data = whole.read_bytes()
    last = GGUFFile(whole).tensors[-1]
    ends = {"metadata": 100, "tensor table": last.offset - 60}
    ends["last tensor"] = last.offset + last.data.nbytes - 1
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: ends[where]])
    with pytest.raises(GGUFFormatError, match=r"truncated|past the end"):
        GGUFFile(cut)


def _mapped_rss_kib(path: Path) -> int:
    """This process's resident KiB of its mappings of `path` (/proc/self/smaps)."""
    total, ours = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            ours = len(fields) >= 6 and fields[5] == str(path)
        elif ours and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_a_released_tensor_leaves_memory_and_reads_back_the_same(tmp_path: Path) -> None:
    """What the block reader does after copying a tensor: its pages leave the process's RSS, and reading
    it again gives the same bytes (paged back in from the file)."""
    path = tmp_path / "big.gguf"
    writer = GGUFWriter(str(path), "llama")
    values = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    writer.add_tensor("blk.0.ffn_up.weight", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    gguf = GGUFFile(path)
    (tensor,) = gguf.tensors
    assert float(np.asarray(tensor.data).sum()) == pytest.approx(float(values.sum()), rel=1e-4)
    touched = _mapped_rss_kib(path.resolve())
    gguf.release(tensor.data)
    assert touched >= 15 * 1024 and _mapped_rss_kib(path.resolve()) <= 1024
    assert np.array_equal(np.asarray(tensor.data).reshape(values.shape), values)
    gguf.release(values)  # not a view of the file: nothing happens
