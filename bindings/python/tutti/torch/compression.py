"""Gradient compression for tutti.torch (Horovod's hvd.Compression).

Compression.none / fp16 / bf16 / topk(ratio) / int8(block=256) run in tutti's
C++ stage on the background thread (see tutti.compression). The Compressor
base class is kept for Horovod-style user compressors (compress(tensor) ->
(tensor, ctx); decompress(tensor, ctx) -> tensor), which run in Python.
"""

from tutti.compression import Compression, Compressor  # noqa: F401
