"""The columnar stored form of a ``metrics.jsonl`` (``metrics.jsonl.cols.xz``), lossless: the
rows it gives back are the rows of the plain file, the same keys in the same order, the same
types, bit-identical floats (NaN and infinities too), and :func:`text` gives back the plain
file byte for byte (:func:`encode` refuses a file it cannot give back so: the caller stores that
one as plain xz).

Layout: an xz stream (CRC32-checked) holding ``MAGIC``, a 4-byte length, a JSON header and the
column blobs one after another. The header lists the row *shapes* (each distinct key tuple, in
its order), the rows' count and, per key, how its values are stored; one blob gives each row's
shape. A key's values (those of the rows that have it, in row order) are stored as

- ``int``: every value a Python ``int`` in the signed 64-bit range: successive differences,
  8-byte little-endian, byte-shuffled (the first byte of every value, then the second, ...);
- ``float``: every value a ``float``, each stored the cheapest exact way: as a decimal ``n /
  10**K`` (``K`` the key's scale; ``time`` written with 3 decimals, ``lr`` = 0.001) with the
  ``n`` stored as successive differences like ints; else as a float32 where the value is one
  exactly (losses computed in float32); else as its float64 bits; one byte a value says which,
  and the float32 and float64 blobs are byte-shuffled;
- ``json``: anything else (mixed types, bools, strings, None, lists): the values as one JSON list.

Byte-shuffling groups bytes of like meaning (the exponents, the high mantissa bytes, ...), which
xz then finds far more alike than whole numbers; the measurements that chose this form are in
docs/reproduce.md ("The columns of a metrics.jsonl"). Pure standard library (``struct``, ``array``, ``lzma``): reading a record
needs neither numpy nor torch.
"""

from __future__ import annotations

import json
import lzma
import math
import struct
import sys
from array import array
from itertools import accumulate

__all__ = ["MAGIC", "ColumnsError", "decode", "encode", "rows_text", "text"]

#: the first bytes of the decompressed payload: the format and its version
MAGIC = b"rnnlab-columns 1\n"
#: a decimal is stored with at most this many decimals (the key's scale ``K``)
MAX_DECIMALS = 6
#: the lzma filters: the xz format (``xz -d`` opens it), CRC32 check, LZMA2 at preset 6 with the
#: literal context turned off (binary columns, not text): 0.2% smaller than plain preset 6 on the
#: records; preset 9 gave the same bytes in twice the time and eight times the memory
FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 6, "lc": 0, "lp": 0, "pb": 0}]
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: a decimal's ``n`` stays below this, so that the difference of two fits 64 bits
_DEC_MAX = 1 << 62
_DEC, _F32, _F64 = 0, 1, 2

if sys.byteorder != "little":  # pragma: no cover - every platform torch supports is little-endian

    def _le(a: array) -> array:
        a.byteswap()
        return a
else:

    def _le(a: array) -> array:
        return a


class ColumnsError(ValueError):
    """A columnar payload that does not parse (damaged: the caller names the file and the fix)."""


def rows_text(rows: list[dict]) -> bytes:
    """The plain ``metrics.jsonl`` that holds ``rows``, as the trainer writes it: one
    ``json.dumps`` line a row."""
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _shuffle(data: bytes, width: int) -> bytes:
    return b"".join(data[i::width] for i in range(width))


def _unshuffle(data: bytes, width: int) -> bytes:
    n = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * n : (i + 1) * n]
    return bytes(out)


def _pack_ints(values: list[int]) -> bytes:
    deltas = [b - a for a, b in zip([0, *values], values)]
    return _shuffle(_le(array("q", deltas)).tobytes(), 8)


def _unpack_ints(blob: bytes) -> list[int]:
    a = array("q")
    a.frombytes(_unshuffle(blob, 8))
    return list(accumulate(_le(a)))


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


def _decimals(v: float) -> int | None:
    """How many decimals ``repr(v)`` writes, where it writes a plain decimal of at most
    :data:`MAX_DECIMALS` (None otherwise: an exponent, NaN, inf)."""
    if not math.isfinite(v) or abs(v) >= 1e15:
        return None
    s = repr(v)
    if "e" in s:
        return None
    frac = s.split(".")[1]
    k = 0 if frac == "0" else len(frac)
    return k if k <= MAX_DECIMALS else None


def _encode_floats(values: list[float]) -> tuple[dict, list[bytes]]:
    ks = [_decimals(v) for v in values]
    scale = max((k for k in ks if k is not None), default=0)
    kinds, dec, f32, f64 = bytearray(), [], [], []
    ten = 10**scale
    for v, k in zip(values, ks):
        if k is not None:
            n = round(v * ten)
            if abs(n) < _DEC_MAX and _bits(n / ten) == _bits(v):
                kinds.append(_DEC)
                dec.append(n)
                continue
        if math.isfinite(v) and abs(v) > 3.4e38:
            kinds.append(_F64)
            f64.append(v)
            continue
        single = struct.pack("<f", v)
        if _bits(struct.unpack("<f", single)[0]) == _bits(v):
            kinds.append(_F32)
            f32.append(single)
        else:
            kinds.append(_F64)
            f64.append(v)
    blobs = [
        bytes(kinds),
        _pack_ints(dec),
        _shuffle(b"".join(f32), 4),
        _shuffle(_le(array("d", f64)).tobytes(), 8),
    ]
    return {"kind": "float", "scale": scale}, blobs


def _decode_floats(meta: dict, blobs: list[bytes]) -> list[float]:
    kinds, dec, f32, f64 = blobs
    ten = 10 ** meta["scale"]
    dec_it = iter([n / ten for n in _unpack_ints(dec)])
    a32 = array("f")
    a32.frombytes(_unshuffle(f32, 4))
    a64 = array("d")
    a64.frombytes(_unshuffle(f64, 8))
    f32_it, f64_it = iter(_le(a32)), iter(_le(a64))
    its = (dec_it, f32_it, f64_it)
    try:
        out = [next(its[k]) for k in kinds]
    except (StopIteration, IndexError):
        raise ColumnsError("a float column's parts do not agree in length") from None
    if next(dec_it, None) is not None or next(f32_it, None) is not None or next(f64_it, None) is not None:
        raise ColumnsError("a float column has values left over")
    return out


def _column(values: list) -> tuple[dict, list[bytes]]:
    if all(type(v) is int for v in values) and all(_INT64[0] <= v <= _INT64[1] for v in values):
        deltas_ok = all(_INT64[0] <= b - a <= _INT64[1] for a, b in zip([0, *values], values))
        if deltas_ok:
            return {"kind": "int"}, [_pack_ints(values)]
    if all(type(v) is float for v in values):
        return _encode_floats(values)
    return {"kind": "json"}, [json.dumps(values).encode()]


def _uncolumn(meta: dict, blobs: list[bytes]) -> list:
    kind = meta["kind"]
    if kind == "int":
        return _unpack_ints(blobs[0])
    if kind == "float":
        return _decode_floats(meta, blobs)
    if kind == "json":
        return json.loads(blobs[0])
    raise ColumnsError(f"unknown column kind {kind!r}")


def encode(data: bytes) -> bytes | None:
    """The columnar form of the plain ``metrics.jsonl`` ``data`` (compressed), or None where the
    form cannot give ``data`` back byte for byte (a partial or non-JSON line, a line that is
    not an object, a line not written by ``json.dumps``): such a file stays plain xz."""
    try:
        rows = [json.loads(line) for line in data.split(b"\n")[:-1]] if data.endswith(b"\n") or not data else None
    except (ValueError, UnicodeDecodeError):
        return None
    if rows is None or not all(type(r) is dict for r in rows) or rows_text(rows) != data:
        return None
    shapes: dict[tuple, int] = {}
    row_shape = [shapes.setdefault(tuple(r), len(shapes)) for r in rows]
    keys: dict[str, list] = {}
    for r in rows:
        for k, v in r.items():
            keys.setdefault(k, []).append(v)
    header = {"rows": len(rows), "shapes": [list(s) for s in shapes], "columns": []}
    blobs = [_pack_ints(row_shape)]
    for k, values in keys.items():
        meta, parts = _column(values)
        header["columns"].append({"key": k, **meta, "sizes": [len(p) for p in parts]})
        blobs += parts
    head = json.dumps(header, separators=(",", ":")).encode()
    payload = b"".join([MAGIC, struct.pack("<I", len(head)), head, struct.pack("<I", len(blobs[0])), *blobs])
    packed = lzma.compress(payload, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, filters=FILTERS)
    return packed if text(packed) == data else None


def decode(packed: bytes) -> list[dict]:
    """The rows a columnar file holds (see the module docstring). A payload that is not xz, not
    this format or inconsistent raises ``lzma.LZMAError`` / ``EOFError`` / :class:`ColumnsError`."""
    payload = lzma.decompress(packed)
    if not payload.startswith(MAGIC):
        raise ColumnsError("not a rnnlab columns payload (no header)")
    try:
        at = len(MAGIC)
        (n,) = struct.unpack_from("<I", payload, at)
        header = json.loads(payload[at + 4 : at + 4 + n])
        at += 4 + n
        (n,) = struct.unpack_from("<I", payload, at)
        at += 4
        shape_of = _unpack_ints(payload[at : at + n])
        at += n
        columns = {}
        for col in header["columns"]:
            parts = []
            for size in col["sizes"]:
                parts.append(payload[at : at + size])
                at += size
            columns[col["key"]] = iter(_uncolumn(col, parts))
        if at != len(payload) or len(shape_of) != header["rows"]:
            raise ColumnsError("the columns do not fill the payload")
        shapes = [tuple(s) for s in header["shapes"]]
        return [{k: next(columns[k]) for k in shapes[s]} for s in shape_of]
    except (struct.error, ValueError, KeyError, TypeError, IndexError, StopIteration) as e:
        raise ColumnsError(f"the columns do not parse ({type(e).__name__}: {e})") from None


def text(packed: bytes) -> bytes:
    """The plain ``metrics.jsonl`` a columnar file holds, byte for byte."""
    return rows_text(decode(packed))
