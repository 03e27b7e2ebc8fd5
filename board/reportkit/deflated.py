"""Raw deflate segments that can go anywhere in a deflate stream, and the CRC arithmetic
that lets a gzip member be stitched from them without compressing them again."""

from __future__ import annotations

import ctypes
import ctypes.util
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Kept segments are compressed once, so a better level than the live text's costs
# only the first request; 6 makes them ~20 % smaller than 1 for ~2x the CPU.
DEFLATE_LEVEL = 6


@dataclass(slots=True)
class Deflated:
    """Raw deflate blocks ending on a byte boundary that refer to nothing before them:
    they can go anywhere in a deflate stream. `crc` and `size` are the text's."""

    data: bytes
    crc: int
    size: int
    # The covered microseconds of the rows (the report's coverage total adds them up).
    covered: int = 0


def deflate(text: bytes, covered: int = 0) -> Deflated:
    # A window no larger than the text: most segments are a few kB, and setting up the
    # full 32 kB window cost more than compressing them (any inflater reads the result).
    bits = max(9, min(zlib.MAX_WBITS, (len(text) - 1).bit_length()))
    compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -bits)
    data = compressor.compress(text) + compressor.flush(zlib.Z_FULL_FLUSH)
    return Deflated(data, zlib.crc32(text), len(text), covered)


def joined(segments: Sequence[Deflated]) -> Deflated:
    """Segments one after the other, as one (each refers to nothing before it)."""
    if len(segments) == 1:
        return segments[0]
    crc = size = covered = 0
    combine = crc32_combine
    for segment in segments:
        crc = combine(crc, segment.crc, segment.size)
        size += segment.size
        covered += segment.covered
    return Deflated(b"".join([s.data for s in segments]), crc, size, covered)


def inflate(segment: Deflated) -> bytes:
    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(segment.data)


def _load_crc32_combine() -> Callable[[int, int, int], int]:
    """zlib's crc32_combine (the CRC of a + b from both CRCs and len(b)): ~1.5 µs in C;
    a pure-Python fallback where libz cannot be loaded."""
    name = ctypes.util.find_library("z")
    if name:
        try:
            found = ctypes.CDLL(name).crc32_combine
            found.restype = ctypes.c_ulong
            found.argtypes = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_long]
            return lambda a, b, n: int(found(a, b, n)) & 0xFFFFFFFF
        except (OSError, AttributeError):
            pass
    return _crc32_combine


def _gf2_times(matrix: list[int], vector: int) -> int:
    total = 0
    i = 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """zlib's crc32_combine in Python (squaring the zero-byte operator)."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << i for i in range(31)]  # one zero bit
    even = [_gf2_times(odd, odd[i]) for i in range(32)]  # two zero bits
    odd = [_gf2_times(even, even[i]) for i in range(32)]  # four zero bits
    while True:
        even = [_gf2_times(odd, odd[i]) for i in range(32)]
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = [_gf2_times(even, even[i]) for i in range(32)]
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


crc32_combine = _load_crc32_combine()
