#pragma once

// Compressed ring allreduce for re-quantising compressors
// (ExchangeKind::kQuantisedRing: int8, compression/int8_compressor.h): a ring
// reduce-scatter whose hops carry quantised chunks, then a ring allgather of
// the reduced quantised chunks, as 1-bit Adam's compressed allreduce does
// (Tang et al., "1-bit Adam: Communication Efficient Large-Scale Training
// with Adam's Convergence Speed", ICML 2021). Each rank sends 2 (n-1)
// chunks of about total / n elements: 2 (n-1) / n of the compressed size,
// against (n-1) whole chunks for an allgather of compressed tensors.
//
// Chunks: ring::evenBlocks(total, n) of the fused vector; chunk c is cut into
// segments of at most 128 Ki elements, and those at tensor boundaries into
// pieces, each packed on its own (compressor.quantise, packedBytes(piece)
// bytes, header included), so that no quantisation block mixes two tensors'
// scales. Every rank derives the same sizes.
// Pipelining: with the backend's ringTransport() (tcp) each segment is sent
// as soon as it is quantised and the next received segment is in flight while
// one is reduced (two receive buffers; two chunk buffers, one being sent while
// the next is quantised), across hop boundaries too: sending, receiving,
// reducing and quantising overlap as in the plain ring. Without it (mpi, test
// transports) each hop is one ringExchange of whole chunks.
// Schedule (the peer arithmetic of ops/algorithms/ring.h):
//   rank r, step 0:     acc[c] = own[c] + residual[c] for c = r-1; quantise it
//   step s = 0..n-2:    ringExchange: send the last quantised chunk to r+1,
//                       receive chunk c = r-s-2 from r-1; acc[c] = own[c] +
//                       residual[c] + decoded chunk; quantise it
//   after step n-2:     the last chunk quantised is chunk r, the full sum;
//                       allgatherv the reduced chunks; every rank decodes all
//                       n chunks into `out` (its own too: identical results).
// Every rank quantises every element exactly once per call, so a residual of
// one float32 per element (the error that rank's quantisation of that element
// left) is deterministic and conserved: summed over ranks, what the outputs
// carried over all calls plus the residuals equals the sum of the inputs.
//
// Error bound of one call, from residuals r_p (p = rank), per element:
//   |out - sum_p (own_p + r_p)| <= sum over the n hops of 0.50007 * s_hop,
//   s_hop = max |partial sum at that hop| over the int8 block / 127
//        <= (sum_p max_block |own_p + r_p| + earlier errors) / 127
//   (a block lies in one tensor), i.e. at most
//   n * 0.50007 * (1 + n / 254) * sum_p max_block |own_p + r_p| / 127
// (n hops of the one-quantisation bound of compression/int8_compressor.h).
//
// Shapes and units: `own`, `residual`, `out`: `total` float32 elements each
// (the fused tensors, concatenated); `residual` is read and updated in
// place; `own` and `out` may be the same buffer (`own` is read only before
// `out` is written). Bytes: each rank sends sum_{c != r} bytes(c) in the reduce-scatter
// and sum_{c != r+1} bytes(c) in the allgather.
// Threading: the background thread; `compressor` only quantises and decodes
// here (const) and must not be used concurrently.
// Errors: the backend's status (kPeerLost ...), or kInvalidArgument from
// accumulate() for a chunk that does not decode (a rank with other
// settings). On error `out` and `residual` are unspecified.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compression/compressor.h"
#include "core/status.h"
#include "ops/backend.h"

namespace tutti {

// Buffers reused between calls (steady-state steps do not allocate).
struct QuantisedRingScratch {
  std::vector<uint8_t> send[2];   // the chunk being sent, the chunk being quantised
  std::vector<uint8_t> recv[2];   // segments (whole chunks without ringTransport) from the left
  std::vector<uint8_t> gathered;  // every rank's reduced chunk, in chunk order
};

// `tensor_sizes`: the element counts of the fused tensors, in order (total =
// their sum); the same on every rank.
Status quantisedRingAllreduce(Backend& backend, const Compressor& compressor,
                              const std::vector<size_t>& tensor_sizes, const float* own,
                              float* residual, float* out, QuantisedRingScratch* scratch);

}  // namespace tutti
