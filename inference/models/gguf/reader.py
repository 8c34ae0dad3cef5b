"""A GGUF file's metadata and tensor table, read in one pass with struct and mapped without copying.

gguf-py's reader wraps every metadata item in numpy views: opening the bundled model's file, whose tokenizer
is a hundred thousand strings, took 8 s of a server's start. This reads the same layout (ggml's GGUF v2/v3:
a header, typed key-value pairs, tensor infos, then aligned tensor data) in well under a second and hands
out each tensor's bytes as a read-only memory map, shaped as gguf-py shapes them.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
# Unquantized tensor types, stored one element per item; every other type is blocks of bytes.
_PLAIN_DTYPES: dict[GGMLQuantizationType, str] = {
    GGMLQuantizationType.F32: "<f4",
    GGMLQuantizationType.F16: "<f2",
    GGMLQuantizationType.F64: "<f8",
    GGMLQuantizationType.I8: "<i1",
    GGMLQuantizationType.I16: "<i2",
    GGMLQuantizationType.I32: "<i4",
    GGMLQuantizationType.I64: "<i8",
}


class GGUFFormatError(ValueError):
    """The file is not a GGUF this reader understands (bad magic, version, type or truncation)."""


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One tensor's entry; `data` maps its bytes ([..., rows, bytes per row] uint8 for block types)."""

    name: str
    ggml_type: GGMLQuantizationType
    dims: tuple[int, ...]  # ggml order: dims[0] is the innermost (the input dimension of a weight)
    offset: int  # from the start of the file
    data: np.ndarray

    @property
    def type_name(self) -> str:
        return self.ggml_type.name

    @property
    def n_elements(self) -> int:
        return math.prod(self.dims)


class GGUFFile:
    """The metadata (`fields`) and tensors of one GGUF file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("rb") as file:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self._memory = np.frombuffer(self._map, dtype=np.uint8)
        self._buffer = memoryview(self._memory.data)
        if bytes(self._buffer[:4]) != MAGIC:
            raise GGUFFormatError(f"{path.name} is not a GGUF file")
        self._at = 4
        version = self._scalar(4)
        if version not in (2, 3):
            raise GGUFFormatError(f"{path.name}: GGUF version {version} is not supported (2 and 3 are)")
        tensor_count, field_count = self._scalar(10), self._scalar(10)
        self.fields: dict[str, Any] = {}
        for _ in range(field_count):
            key = self._string()
            self.fields[key] = self._value(self._scalar(4))
        infos = [self._tensor_info() for _ in range(tensor_count)]
        alignment = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        data_start = -(-self._at // alignment) * alignment
        self.tensors = [self._tensor(name, dims, kind, data_start + at) for name, dims, kind, at in infos]

    def release(self, data: np.ndarray) -> None:
        """Drop the file's pages under `data` (a tensor's view of this file) from this process's memory: a
        mapped page once read stays counted in RSS until the mapping goes, so a loader that has copied a
        tensor calls this, and reading the file holds it about once, not twice. Reading `data` again pages it
        back in from the file."""
        start = data.__array_interface__["data"][0] - self._memory.__array_interface__["data"][0]
        if data.nbytes == 0 or start < 0 or start + data.nbytes > self._memory.nbytes:
            return  # not a view of this file
        first = start // mmap.PAGESIZE * mmap.PAGESIZE
        self._map.madvise(mmap.MADV_DONTNEED, first, start + data.nbytes - first)

    def field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.fields.get("general.architecture", "?"))

    def tensor_types(self) -> frozenset[str]:
        """The types of its weight matrices (two or more dimensions): what the weight plan reads."""
        return frozenset(t.type_name for t in self.tensors if len(t.dims) >= 2)

    def tensor(self, name: str) -> GGUFTensor | None:
        return next((t for t in self.tensors if t.name == name), None)

    def _take(self, size: int) -> memoryview:
        end = self._at + size
        if end > len(self._buffer):
            raise GGUFFormatError(f"{self.path.name} is truncated")
        view = self._buffer[self._at : end]
        self._at = end
        return view

    def _scalar(self, value_type: int) -> Any:
        fmt = _SCALARS.get(value_type)
        if fmt is None:
            raise GGUFFormatError(f"{self.path.name}: unknown GGUF value type {value_type}")
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _string(self) -> str:
        return bytes(self._take(self._scalar(10))).decode("utf-8", errors="replace")

    def _value(self, value_type: int) -> Any:
        if value_type == _STRING:
            return self._string()
        if value_type == _ARRAY:
            item_type, count = self._scalar(4), self._scalar(10)
            return self._array(item_type, count)
        return self._scalar(value_type)

    def _array(self, item_type: int, count: int) -> Any:
        if item_type in _SCALARS:
            dtype = np.dtype(_SCALARS[item_type])  # struct's little-endian codes are numpy's too
            return np.frombuffer(self._take(dtype.itemsize * count), dtype=dtype).copy()
        if item_type == _STRING:
            return self._strings(count)
        read: Callable[[int], Any] = self._value
        return [read(item_type) for _ in range(count)]

    def _strings(self, count: int) -> list[str]:
        # The tokenizer's vocabulary and merges: one tight loop rather than a call per item.
        buffer, at, unpack = self._buffer, self._at, struct.Struct("<Q").unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            (length,) = unpack(buffer, at)
            at += 8
            append(str(buffer[at : at + length], "utf-8", "replace"))
            at += length
        if at > len(buffer):
            raise GGUFFormatError(f"{self.path.name} is truncated")
        self._at = at
        return out

    def _tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string()
        n_dims = self._scalar(4)
        dims = tuple(self._scalar(10) for _ in range(n_dims))
        return name, dims, self._scalar(4), self._scalar(10)

    def _tensor(self, name: str, dims: tuple[int, ...], kind: int, offset: int) -> GGUFTensor:
        try:
            ggml_type = GGMLQuantizationType(kind)
        except ValueError:
            raise GGUFFormatError(f"{self.path.name}: tensor {name} has unknown type {kind}") from None
        shape, count = tuple(reversed(dims)), math.prod(dims)
        plain = _PLAIN_DTYPES.get(ggml_type)
        if plain is not None:
            dtype = np.dtype(plain)
            size = count * dtype.itemsize
        else:
            block, block_bytes = GGML_QUANT_SIZES[ggml_type]
            if dims[0] % block:
                raise GGUFFormatError(f"{self.path.name}: {name} is not whole {ggml_type.name} rows")
            dtype = np.dtype(np.uint8)
            size = count // block * block_bytes
            shape = (*shape[:-1], dims[0] // block * block_bytes)
        if offset + size > len(self._memory):
            raise GGUFFormatError(f"{self.path.name}: tensor {name} runs past the end of the file")
        data = self._memory[offset : offset + size].view(dtype).reshape(shape)
        return GGUFTensor(name, ggml_type, dims, offset, data)
