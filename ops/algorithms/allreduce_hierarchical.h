#pragma once

// Hierarchical allreduce over ranks grouped by host (ops/host_groups.h):
//   1. ring reduce-scatter within the host: local rank l ends with block l
//      (ring::evenBlocks(count, local size)) reduced over its host;
//   2. allreduce of block l across the hosts, among the ranks at local
//      index l: every local rank drives its own block, so each host's cross
//      traffic is 2(H-1)/H of the buffer (H hosts) spread over all its ranks,
//      against 2(n-1)/n through one link per host for the flat ring. The
//      block is cut into H sub-blocks; cross rank j receives sub-block j
//      from every other host and reduces it, then sends it to all of them
//      (a direct reduce-scatter and allgather: as many bytes as a ring, in
//      messages that are all posted at once);
//   3. ring allgather within the host.
// Pipelined: the buffer is cut into chunks, and chunk t's step 1 runs while
// chunk t-1's step 2 is in flight and before chunk t-2's step 3, so the
// work within a host overlaps the transfers across hosts.
// The scheme is Horovod's NCCLHierarchicalAllreduce (horovod/common/ops/
// nccl_operations.cc: ncclReduceScatter within the node, MPI_Allreduce
// across nodes, ncclAllGather within the node), here on the ring algorithms
// of ops/algorithms/ for every transport the tcp backend runs over.
//
// Results: every rank gets the same bits (each element is reduced on one
// rank and copied to the others); integer ops, min and max equal the flat
// ring's bit for bit; a floating-point sum or product is taken in another
// order (within a host, then across hosts), so it agrees within rounding.
//
// Compressed across hosts (`across` = kFloat16 or kBFloat16, float32 data
// only): step 2 exchanges each block cast to the 16-bit type (half the bytes
// over the links) and reduces it there (ops/reduce.h: adds in float32,
// rounds back after each add); steps 1 and 3 stay float32 within the host.
// Every rank still gets the same bits. Error: one rounding of each host's
// partial sum and of each cross-host add, as for fp16 compression
// (compression/cast_compressor.h); the caller prescales to stay below 65504.
//
// Threading, blocking, errors and count 0: as allreduceRing
// (ops/algorithms/allreduce_ring.h). Every rank of the world calls it with
// the same count, dtype, op and segment size, passing its own host's local
// transport and its cross transport; every host holds the same number of
// ranks. kAverage reduces as kSum (the caller scales).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

// out[i] = op over all ranks of in[i]; in == out is in place, otherwise `in`
// is only read and must not overlap `out`. `scratch` as for allreduceRing;
// `staging` holds what arrives from other hosts (three chunks' worth, at
// most 3 x chunk_bytes / local size plus rounding, and as much again for
// the 16-bit casts of allreduceHierarchicalCast); both are resized as needed
// and may be reused between calls. `chunk_bytes`: the pipeline's chunk
// (0: 4 MiB), rounded down to whole elements.
Status allreduceHierarchical(Transport& local, Transport& cross, const void* in, void* out,
                             size_t count, DataType dtype, ReduceOp op, size_t segment_bytes,
                             std::vector<uint8_t>* scratch, std::vector<uint8_t>* staging,
                             size_t chunk_bytes = 0);

// The same with the exchange across hosts in `across`: `dtype` itself, or
// for float32 data kFloat16 or kBFloat16 (checked; see above).
Status allreduceHierarchicalCast(Transport& local, Transport& cross, const void* in, void* out,
                                 size_t count, DataType dtype, ReduceOp op, DataType across,
                                 size_t segment_bytes, std::vector<uint8_t>* scratch,
                                 std::vector<uint8_t>* staging, size_t chunk_bytes = 0);

}  // namespace tutti
