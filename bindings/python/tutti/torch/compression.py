"""Gradient compression for tutti.torch (Horovod's horovod.torch.compression).

Compressor is Horovod's interface (static compress(tensor) -> (tensor, ctx)
and decompress(tensor, ctx) -> tensor); Compression.none / fp16 are Horovod's
NoneCompressor / FP16Compressor (fp16 casts floats to float16 and back when
called). Passed as compression=, Compression.none / fp16 / bf16 / topk(ratio) /
int8(block=256) run in tutti's C++ stage on the background thread (see
tutti.compression); any other compressor runs in Python around the allreduce.
"""

from tutti.compression import (
    BF16Compressor,
    Compression,
    Compressor,
    FP16Compressor,
    NativeCompressor,
    NoneCompressor,
)

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NativeCompressor",
           "NoneCompressor"]
