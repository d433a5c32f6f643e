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

Horovod compatibility: a Compressor also has the static-looking
compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx) of Horovod's
interface; for these native compressors both are the identity, because the
compression happens inside tutti. A user-defined Horovod-style compressor
(any object with compress/decompress and no `spec`) still works: it runs in
Python around an uncompressed allreduce.
"""


class Compressor:
    """A compressor of tutti's C++ stage, named by its spec string ("topk:0.01")."""

    __slots__ = ("spec",)

    def __init__(self, spec):
        self.spec = str(spec)

    def compress(self, tensor):
        """Horovod's interface: the identity (tutti compresses inside)."""
        return tensor, None

    def decompress(self, tensor, ctx):
        """Horovod's interface: the identity (tutti decompresses inside)."""
        del ctx
        return tensor

    def __eq__(self, other):
        return isinstance(other, Compressor) and other.spec == self.spec

    def __hash__(self):
        return hash(self.spec)

    def __repr__(self):
        return "Compressor(%r)" % self.spec


class Compression:
    """The compressors: Compression.none, .fp16, .bf16, .topk(ratio), .int8(block=256)."""

    none = Compressor("none")
    fp16 = Compressor("fp16")
    bf16 = Compressor("bf16")

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
            return Compressor("topk:%r:warmup=%d" % (ratio, warmup))
        return Compressor("topk:%r" % ratio)

    @staticmethod
    def int8(block=256):
        """int8 quantisation with a scale per `block` entries (1..16777216), error feedback."""
        if int(block) != block or not 1 <= block <= 1 << 24:
            raise ValueError("int8 block must be an integer in [1, 16777216], got %r" % (block,))
        return Compressor("int8:%d" % block)


def native_spec(compression):
    """(spec or None, python_compressor or None) for a compression= argument:
    None -> (None, None): the job default; a native Compressor -> (its spec,
    None); a spec string -> (it, None); any other object with compress and
    decompress -> (None, it), run in Python."""
    if compression is None:
        return None, None
    if isinstance(compression, Compressor):
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
