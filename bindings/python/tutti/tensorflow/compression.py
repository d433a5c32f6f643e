"""Gradient compression for tutti.tensorflow (Horovod's
horovod/tensorflow/compression.py, 0.28.1, plus tutti's compressors).

Compression.none, .fp16 and .bf16 are Horovod's compressor classes: called
directly, fp16/bf16 cast floating-point tensors to float16/bfloat16 and back
(compress returns (tensor, original dtype)). Passed as compression= to
allreduce, grouped_allreduce, DistributedGradientTape or DistributedOptimizer
they run as tutti's C++ stage instead (their `spec`: the tensor travels as
float16/bfloat16 and the ring adds in float32; see tutti.compression), as do
Compression.topk(ratio) and Compression.int8(block). Any other compressor
(an object with compress and decompress) runs in Python around an
uncompressed allreduce, as in Horovod. compression=None is the job's
TUTTI_COMPRESSION.
"""

import tensorflow as tf

from tutti import compression as _common
from tutti.compression import Compressor  # Horovod's interface: compress, decompress


class NoneCompressor(Compressor):
    """No compression (the default); spec "none"."""

    spec = "none"


class _CastCompressor(Compressor):
    _dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating:
            return tf.cast(tensor, dtype=cls._dtype), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating:
            return tf.cast(tensor, dtype=ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Floating-point tensors as float16 (Horovod's FP16Compressor); spec "fp16"."""

    spec = "fp16"
    _dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Floating-point tensors as bfloat16 (tutti's); spec "bf16"."""

    spec = "bf16"
    _dtype = tf.bfloat16


class Compression:
    """The compressors: none, fp16, bf16 (classes), topk(ratio), int8(block=256)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
    topk = staticmethod(_common.Compression.topk)
    int8 = staticmethod(_common.Compression.int8)


_NATIVE = (NoneCompressor, FP16Compressor, BF16Compressor)


def resolve(compression):
    """(spec or None, python_compressor or None) for a compression= argument:
    None -> the job's default; these classes, a tutti.Compression member,
    a NativeCompressor or a spec string -> (spec, None); any other object
    with compress/decompress -> (None, it), run in Python."""
    if any(compression is c for c in _NATIVE):
        return compression.spec, None
    return _common.native_spec(compression)
