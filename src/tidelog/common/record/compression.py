"""Compression codecs of a record batch's records section.

Each codec is a C/Rust-backed library that is kept up to date: zlib (gzip framing), cramjam
(snappy raw blocks; python-snappy is itself a wrapper over it now), lz4 (frame format) and
zstandard. The compressed section carries its uncompressed length in front (see
docs/record-format.md) so decompression is bounded: a small batch can never inflate into gigabytes.
"""

from __future__ import annotations

import enum
import threading
import zlib
from typing import Final

import cramjam
import lz4.frame
import zstandard

from tidelog.common.errors import CorruptRecordError, UnsupportedCompressionTypeError

__all__ = ["CompressionType", "compress", "decompress"]

GZIP_WBITS: Final = 31  # zlib's way of asking for a gzip header and trailer
GZIP_LEVEL: Final = 6
ZSTD_LEVEL: Final = 3


class CompressionType(enum.IntEnum):
    """Codec ids stored in bits 0-2 of a batch's attributes (Kafka's numbering)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        try:
            return cls[name.upper()]
        except KeyError:
            raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


# zstandard's (de)compressor objects are not safe to share between threads; keep one per thread.
_zstd_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    compressor: zstandard.ZstdCompressor | None = getattr(_zstd_local, "compressor", None)
    if compressor is None:
        compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        _zstd_local.compressor = compressor
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_zstd_local, "decompressor", None)
    if decompressor is None:
        decompressor = zstandard.ZstdDecompressor()
        _zstd_local.decompressor = decompressor
    return decompressor


def compress(codec: CompressionType, data: bytes) -> bytes:
    match codec:
        case CompressionType.GZIP:
            return zlib.compress(data, GZIP_LEVEL, wbits=GZIP_WBITS)
        case CompressionType.SNAPPY:
            return bytes(cramjam.snappy.compress_raw(data))
        case CompressionType.LZ4:
            return bytes(lz4.frame.compress(data))
        case CompressionType.ZSTD:
            return bytes(_zstd_compressor().compress(data))
    raise UnsupportedCompressionTypeError(f"cannot compress with codec {codec!r}")


def decompress(codec: CompressionType, data: bytes | memoryview, uncompressed_length: int) -> bytes:
    """Inflate `data`, which must come out at exactly `uncompressed_length` bytes."""
    try:
        match codec:
            case CompressionType.GZIP:
                inflater = zlib.decompressobj(wbits=GZIP_WBITS)
                out = inflater.decompress(data, uncompressed_length)
                if inflater.unconsumed_tail or not inflater.eof:
                    raise CorruptRecordError("gzip section is longer than its declared length")
            case CompressionType.SNAPPY:
                if cramjam.snappy.decompress_raw_len(data) != uncompressed_length:
                    raise CorruptRecordError("snappy section length differs from its declared length")
                out = bytes(cramjam.snappy.decompress_raw(data))
            case CompressionType.LZ4:
                lz4_inflater = lz4.frame.LZ4FrameDecompressor()
                out = lz4_inflater.decompress(data, max_length=uncompressed_length)
                if not lz4_inflater.eof:
                    raise CorruptRecordError("lz4 section is longer than its declared length")
            case CompressionType.ZSTD:
                out = _zstd_decompressor().decompress(data, max_output_size=uncompressed_length)
            case _:
                raise UnsupportedCompressionTypeError(f"cannot decompress codec {codec!r}")
    except CorruptRecordError:
        raise
    except UnsupportedCompressionTypeError:
        raise
    except Exception as error:  # each library has its own error types; all mean the same here
        raise CorruptRecordError(f"{codec.name} section does not decompress: {error}") from error
    if len(out) != uncompressed_length:
        raise CorruptRecordError(
            f"{codec.name} section inflates to {len(out)} bytes, header says {uncompressed_length}"
        )
    return out
