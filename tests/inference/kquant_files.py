"""K-quant GGUFs made in the tests: Q4_K, Q6_K and IQ4_XS blocks written by a plain numpy quantizer (gguf-py
reads these types but does not write them), and the bundled model requantized the way llama-quantize's
Q4_K_M does it (or to IQ4_XS), with no download and no llama.cpp build.

The quantizer is not llama.cpp's (no search for the best scales), only a valid one: gguf-py's dequantize
reads its blocks back within each sub-block's step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

SUPER = 256


def quantize_q4_k(weights: np.ndarray) -> np.ndarray:
    """[out, in] float32 (in a multiple of 256) -> [out, in / 256 * 144] uint8 Q4_K blocks."""
    out_features = weights.shape[0]
    x = weights.astype(np.float32).reshape(-1, 8, 32)  # super-blocks of 8 sub-blocks of 32
    scale, minimum = _fit_scale_min(x)  # per sub-block: W = scale * q - minimum, q in 0..15
    d = (scale.max(-1) / 63.0).astype(np.float16)
    dmin = (minimum.max(-1) / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(_ratio(scale, d32)), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_ratio(minimum, dmin32)), 0, 63).astype(np.uint8)
    q = np.clip(np.rint(_ratio(x + (dmin32 * m)[..., None], (d32 * sc)[..., None])), 0, 15).astype(np.uint8)
    packed = np.zeros((x.shape[0], 12), np.uint8)  # ggml's get_scale_min_k4, inverted
    packed[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(x.shape[0], 128)  # pair j: sub-block 2j low, 2j+1 high
    halves = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2)]
    return np.concatenate([*halves, packed, qs], 1).reshape(out_features, -1)


def _fit_scale_min(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of 32 (last axis): the (scale, minimum) of W = scale * q - minimum, q in 0..15, that fits x
    best in least squares over a few candidate level assignments (the idea of llama.cpp's make_qkx2_quants:
    the plain min-to-max grid wastes levels on outliers)."""
    low = np.minimum(x.min(-1), 0.0)
    span = np.maximum(x.max(-1) - low, 1e-12)
    best_scale, best_min = span / 15.0, -low
    best_err = _fit_error(x, best_scale, best_min)
    for step in np.linspace(-1.0, 1.0, 21):
        q = np.clip(np.rint((x - low[..., None]) * ((15.0 + step) / span)[..., None]), 0, 15)
        n = q.shape[-1]
        sq, sx, sqq, sqx = q.sum(-1), x.sum(-1), (q * q).sum(-1), (q * x).sum(-1)
        det = n * sqq - sq * sq
        scale = _ratio(n * sqx - sq * sx, det)
        offset = _ratio(sqq * sx - sq * sqx, det)  # W = scale * q + offset
        usable = (det > 0) & (offset <= 0)  # Q4_K's minimum is stored unsigned: offset <= 0
        err = np.where(usable, _fit_error(x, scale, -offset), np.inf)
        better = err < best_err
        best_scale = np.where(better, scale, best_scale)
        best_min = np.where(better, -offset, best_min)
        best_err = np.minimum(err, best_err)
    return best_scale.astype(np.float32), best_min.astype(np.float32)


def _fit_error(x: np.ndarray, scale: np.ndarray, minimum: np.ndarray) -> np.ndarray:
    q = np.clip(np.rint(_ratio(x + minimum[..., None], np.broadcast_to(scale[..., None], x.shape))), 0, 15)
    return ((q * scale[..., None] - minimum[..., None] - x) ** 2).sum(-1)


def quantize_q6_k(weights: np.ndarray) -> np.ndarray:
    """[out, in] float32 (in a multiple of 256) -> [out, in / 256 * 210] uint8 Q6_K blocks."""
    out_features = weights.shape[0]
    x = weights.astype(np.float32).reshape(-1, 16, 16)  # super-blocks of 16 sub-blocks of 16
    scale = np.abs(x).max(-1) / 31.0  # W = d * sc * (q - 32), q - 32 in -32..31
    d = (scale.max(-1) / 127.0).astype(np.float16)
    d32 = d.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(scale, d32, out=np.zeros_like(scale), where=d32 > 0)), -128, 127).astype(
        np.int8
    )
    step = (d32 * sc)[..., None]
    q = np.clip(np.rint(np.divide(x, step, out=np.zeros_like(x), where=step != 0)), -32, 31)
    q = (q + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [block, half, quarter, l]
    ql = np.concatenate(
        [q[:, :, 0] & 0x0F | (q[:, :, 2] & 0x0F) << 4, q[:, :, 1] & 0x0F | (q[:, :, 3] & 0x0F) << 4], axis=2
    )  # [block, half, 64]
    qh = (q[:, :, 0] >> 4) | (q[:, :, 1] >> 4) << 2 | (q[:, :, 2] >> 4) << 4 | (q[:, :, 3] >> 4) << 6
    parts = [ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), d.view(np.uint8).reshape(-1, 2)]
    return np.concatenate(parts, 1).reshape(out_features, -1)


IQ4_NL_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)


def quantize_iq4_xs(weights: np.ndarray) -> np.ndarray:
    """[out, in] float32 (in a multiple of 256) -> [out, in / 256 * 136] uint8 IQ4_XS blocks: per sub-block
    of 32 a scale d * (ls - 32) (ls - 32 in 0..31 here) and each weight the nearest of the 16 table values."""
    out_features = weights.shape[0]
    x = weights.astype(np.float32).reshape(-1, 8, 32)
    scale = np.abs(x).max(-1) / 127.0
    d = (scale.max(-1) / 31.0).astype(np.float16)
    d32 = d.astype(np.float32)[:, None]
    ls = np.clip(np.rint(_ratio(scale, d32)), 0, 31).astype(np.uint16)  # ls - 32 in 0..31: stored + 32
    step = (d32 * ls.astype(np.float32))[..., None]
    index = np.abs(_ratio(x, step)[..., None] - IQ4_NL_VALUES).argmin(-1).astype(np.uint8)  # [block, 8, 32]
    qs = (index[..., :16] | (index[..., 16:] << 4)).reshape(-1, 128)
    stored = ls + 32
    low = (stored & 0x0F).astype(np.uint8)
    scales_l = low[:, 0::2] | (low[:, 1::2] << 4)
    scales_h = ((stored >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(-1).astype(np.uint16)
    parts = [d.view(np.uint8).reshape(-1, 2), scales_h.view(np.uint8).reshape(-1, 2), scales_l, qs]
    return np.concatenate(parts, 1).reshape(out_features, -1)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b, 0 where b is 0 (an all-zero sub-block)."""
    a, b = np.broadcast_arrays(a, b)
    return np.divide(a, b, out=np.zeros(a.shape, np.float32), where=b != 0)


def _more_bits(layer: int, layers: int) -> bool:
    """llama-quantize's use_more_bits: which layers' attn_v and ffn_down Q4_K_M keeps in Q6_K."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def requantize_q4_k_m(source: Path, target: Path, *, mix: str = "Q4_K_M") -> dict[str, int]:
    """The GGUF `source` rewritten with Q4_K_M's choice of types: Q4_K, with Q6_K for the output and for the
    attn_v and ffn_down of some layers, and Q8_0 where a row is not whole super-blocks (llama-quantize's own
    fallback for Q6_K); with mix "IQ4_XS", IQ4_XS for every tensor of whole super-blocks; with "Q4_0" or
    "Q8_0", that type for every matrix. Metadata and tokenizer are copied. Returns how many tensors took
    each type."""
    reader = GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    layers = int(reader.fields[f"{arch}.block_count"].contents())
    writer = GGUFWriter(target, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub_type = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type)
    counts: dict[str, int] = {}
    for tensor in reader.tensors:
        values = dequantize(tensor.data, tensor.tensor_type)
        chosen = _chosen_type(tensor.name, values.shape, layers, mix)
        counts[chosen.name] = counts.get(chosen.name, 0) + 1
        if chosen == T.F32:
            writer.add_tensor(tensor.name, values.astype(np.float32))
            continue
        rows = values.reshape(-1, values.shape[-1])
        if chosen == T.Q4_K:
            data = quantize_q4_k(rows)
        elif chosen == T.Q6_K:
            data = quantize_q6_k(rows)
        elif chosen == T.IQ4_XS:
            data = quantize_iq4_xs(rows)
        else:
            data = quantize(rows, chosen)
        writer.add_tensor(tensor.name, data, raw_shape=data.shape, raw_dtype=chosen)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return counts


def _chosen_type(name: str, shape: tuple[int, ...], layers: int, mix: str) -> T:
    if len(shape) < 2:
        return T.F32
    if mix in ("Q4_0", "Q8_0"):  # one legacy block type throughout (every row here is whole 32-blocks)
        return T[mix]
    if shape[-1] % SUPER:
        return T.Q8_0
    if mix == "IQ4_XS":
        return T.IQ4_XS
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if name in ("output.weight", "token_embd.weight"):
        return T.Q6_K
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and _more_bits(layer, layers):
        return T.Q6_K
    return T.Q4_K
