"""Gradient compression applied around allreduce (Horovod's Compression).

A compressor turns a tensor into what travels (compress -> (tensor, ctx)) and
back (decompress(tensor, ctx)). Stateless; safe from any thread.
"""

import torch


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors (float32, float64, bfloat16) travel as float16 and
    come back in their own dtype; other dtypes pass unchanged. Halves the bytes
    at float16's precision (about 3 decimal digits, max 65504)."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.type(ctx)


class Compression:
    """The available compressors: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
