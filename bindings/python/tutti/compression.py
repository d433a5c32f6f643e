"""Gradient compression specs for allreduce, run by tutti's C++ stage.

tutti.Compression.none / fp16 / bf16 / topk(ratio) / int8(block=256) name a
compressor that the runtime applies on its background thread between the
fusion buffer and the network (see core/compression_spec.h and
compression/compressor.h in the source):

- none: floats travel as they are.
- fp16, bf16: floats travel as float16/bfloat16 (half the bytes); the ring
  adds in float32. Each ring hop rounds the partial sum again: the error of
  the result is up to a few units of the type's rounding (2^-11 fp16, 2^-8
  bf16) times the sum of the magnitudes, e.g. max |error| / max |result|
  about 2^-10 (fp16) and 2^-7 (bf16) at 4 ranks.
- topk(ratio): only the largest ratio of the entries (by magnitude) of each
  tensor travel, as (index, float16 value) pairs; the rest is kept per tensor
  name and added to the next step's gradient (error feedback). Values travel
  as float16, so a sent value saturates at +-65504 (the excess stays in the
  residual and goes out in later steps; no inf appears): with a loss scaler,
  unscale the gradients before they are allreduced, or use fp16/int8/none.
  topk(ratio, warmup=N) keeps more at first (25 % falling exponentially to
  ratio over N steps), as Deep Gradient Compression does.
- int8(block): int8 values with a float32 scale per block of entries, with
  error feedback. One inf or nan in a block makes the whole block's result
  nan (still non-finite for overflow checks); later steps are clean.

Compression applies to Sum/Average of floating-point tensors; integer and bool
tensors and other ops pass through. compression=None means the job's default
(TUTTI_COMPRESSION, `tuttirun --compression`, itself "none" by default).

Horovod compatibility (horovod.torch.compression 0.28.1): Compressor is
Horovod's interface, static compress(tensor) -> (tensor, ctx) and
decompress(tensor, ctx) -> tensor. Compression.none, .fp16 and .bf16 are such
classes (NoneCompressor, FP16Compressor, BF16Compressor): called directly,
fp16/bf16 cast floating-point tensors to float16/bfloat16 (ctx: the original
dtype) and back, as Horovod's FP16Compressor; passed as compression= they run
as tutti's C++ stage instead (their `spec`). topk(...) and int8(...) return
NativeCompressor objects (compress/decompress: the identity; the work happens
inside tutti). Any other compressor (a Compressor subclass, or any object
with compress and decompress) runs in Python around an uncompressed
allreduce, as in Horovod.
"""

from typing import Optional


class Compressor:
    """Horovod's interface for compressing and decompressing a tensor. Subclass
    it with static compress(tensor) -> (tensor, ctx) and decompress(tensor,
    ctx) -> tensor; pass the class (or an instance) as compression=."""

    @staticmethod
    def compress(tensor):
        """Returns (the tensor to send, the context decompress needs)."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the received tensor restored with ctx."""
        del ctx
        return tensor


class NoneCompressor(Compressor):
    """No compression (Horovod's NoneCompressor); spec "none"."""

    spec = "none"


class _CastCompressor(Compressor):
    """Casts floating-point tensors to torch.<_dtype> and back (ctx: the
    original dtype); other tensors pass through."""

    _dtype: Optional[str] = None  # the torch dtype's name

    @classmethod
    def compress(cls, tensor):
        import torch
        if tensor.dtype.is_floating_point:
            return tensor.to(getattr(torch, cls._dtype)), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None and ctx.is_floating_point else tensor


class FP16Compressor(_CastCompressor):
    """Floating-point tensors as float16 (Horovod's FP16Compressor); spec "fp16"."""

    spec = "fp16"
    _dtype = "float16"


class BF16Compressor(_CastCompressor):
    """Floating-point tensors as bfloat16 (tutti's; Horovod has none); spec "bf16"."""

    spec = "bf16"
    _dtype = "bfloat16"


_NATIVE_CLASSES = (NoneCompressor, FP16Compressor, BF16Compressor)


class NativeCompressor(Compressor):
    """A compressor of tutti's C++ stage, named by its spec string ("topk:0.01").
    compress/decompress are the identity (tutti compresses inside)."""

    __slots__ = ("spec",)

    def __init__(self, spec):
        self.spec = str(spec)

    def __eq__(self, other):
        return isinstance(other, NativeCompressor) and other.spec == self.spec

    def __hash__(self):
        return hash(self.spec)

    def __repr__(self):
        return "NativeCompressor(%r)" % self.spec


class Compression:
    """The compressors: Compression.none, .fp16, .bf16, .topk(ratio), .int8(block=256),
    .cross_host("fp16" or "bf16")."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def topk(ratio, warmup=0):
        """Top-k sparsification with error feedback; ratio in (0, 1], e.g. 0.01.

        warmup=N: Deep Gradient Compression's sparsity warm-up, the kept ratio
        falling exponentially from 25 % to `ratio` over the first N steps of
        each tensor ("topk:<ratio>:warmup=N"; 0: none)."""
        ratio = float(ratio)
        if not 0.0 < ratio <= 1.0:
            raise ValueError("topk ratio must be in (0, 1], got %r" % ratio)
        if int(warmup) != warmup or not 0 <= warmup <= 999999999:
            raise ValueError("topk warmup must be an integer in [0, 999999999], got %r"
                             % (warmup,))
        if warmup:
            return NativeCompressor("topk:%r:warmup=%d" % (ratio, warmup))
        return NativeCompressor("topk:%r" % ratio)

    @staticmethod
    def int8(block=256):
        """int8 quantisation with a scale per `block` entries (1..16777216), error feedback."""
        if int(block) != block or not 1 <= block <= 1 << 24:
            raise ValueError("int8 block must be an integer in [1, 16777216], got %r" % (block,))
        return NativeCompressor("int8:%d" % block)

    @staticmethod
    def cross_host(kind="fp16"):
        """fp16 or bf16 for the bytes that cross hosts only ("fp16:cross_host"):
        float32 within a host, the 16-bit cast across hosts where the
        hierarchical allreduce runs (several hosts with several ranks each);
        elsewhere the whole buffer is cast, as Compression.fp16 does."""
        if kind not in ("fp16", "bf16"):
            raise ValueError("cross_host kind must be 'fp16' or 'bf16', got %r" % (kind,))
        return NativeCompressor(kind + ":cross_host")


def native_spec(compression):
    """(spec or None, python_compressor or None) for a compression= argument:
    None -> (None, None): the job default; Compression.none/fp16/bf16 or a
    NativeCompressor -> (its spec, None); a spec string -> (it, None); any
    other object with compress and decompress (a Compressor subclass or
    instance, even one derived from FP16Compressor) -> (None, it), run in
    Python."""
    if compression is None:
        return None, None
    if type(compression) is NativeCompressor or any(compression is c for c in _NATIVE_CLASSES):
        return compression.spec, None
    if isinstance(compression, str):
        return compression, None
    if hasattr(compression, "compress") and hasattr(compression, "decompress"):
        return None, compression
    if compression is Compression.int8:  # written without the call: the default block
        return Compression.int8().spec, None
    if compression is Compression.topk:
        raise TypeError("Compression.topk needs its ratio: Compression.topk(0.01) keeps the "
                        "1 % largest magnitudes")
    raise TypeError("compression must be a tutti.Compression member, a spec string or an object "
                    "with compress/decompress, got %r" % (compression,))
