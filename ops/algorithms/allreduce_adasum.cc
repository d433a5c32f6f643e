#include "ops/algorithms/allreduce_adasum.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ops/adasum_math.h"

namespace tutti {
namespace {

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

// Splits a segment whose tensors have `counts` elements at element `split`:
// `first` gets each tensor's elements before it, `second` those after.
void splitCounts(const std::vector<size_t>& counts, size_t split, std::vector<size_t>* first,
                 std::vector<size_t>* second) {
  first->assign(counts.size(), 0);
  second->assign(counts.size(), 0);
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const size_t before = at >= split ? 0 : std::min(counts[i], split - at);
    (*first)[i] = before;
    (*second)[i] = counts[i] - before;
    at += counts[i];
  }
}

// Sends `send_bytes` to `peer` and receives `recv_bytes` from it, both at
// once. Zero-byte directions are skipped (both sides compute the same sizes).
Status exchange(Transport& t, int peer, const void* send, size_t send_bytes, void* recv,
                size_t recv_bytes) {
  if (recv_bytes > 0) t.postRecv(peer, recv, recv_bytes);
  if (send_bytes > 0) t.postSend(peer, send, send_bytes);
  return t.waitAll();
}

// Sums `values` over the 2 * level ranks that share this rank's bits above
// `level` (Horovod's reduction communicator of that level), by recursive
// doubling at distances 1, 2, ..., level. Each step adds two vectors that the
// two partners hold swapped, so every rank of the group ends with bitwise the
// same sums.
Status sumOverGroup(Transport& t, int level, std::vector<double>* values,
                    std::vector<double>* incoming) {
  incoming->resize(values->size());
  const size_t bytes = values->size() * sizeof(double);
  for (int d = 1; d <= level; d <<= 1) {
    TUTTI_RETURN_IF_ERROR(
        exchange(t, t.rank() ^ d, values->data(), bytes, incoming->data(), bytes));
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] += (*incoming)[i];
  }
  return Status::ok();
}

// One level's combine: `mine` (this rank's kept segment, tensors of
// `counts` elements) with `theirs` (the partner's copy of it). `left`: this
// rank holds the lower ranks' vector (a) at this level.
Status combine(Transport& t, int level, bool left, uint8_t* mine, const uint8_t* theirs,
               const std::vector<size_t>& counts, DataType dtype, std::vector<double>* sums,
               std::vector<double>* incoming) {
  const size_t esize = dataTypeSize(dtype);
  // Per tensor: a.b, |a|^2, |b|^2, a being the lower ranks' vector.
  sums->assign(3 * counts.size(), 0.0);
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const DotAndNorms d =
        adasumDotAndNorms(mine + at * esize, theirs + at * esize, counts[i], dtype);
    (*sums)[3 * i] = d.dot;
    (*sums)[3 * i + 1] = left ? d.a_norm2 : d.b_norm2;
    (*sums)[3 * i + 2] = left ? d.b_norm2 : d.a_norm2;
    at += counts[i];
  }
  TUTTI_RETURN_IF_ERROR(sumOverGroup(t, level, sums, incoming));
  at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const AdasumCoefficients c =
        adasumCoefficients((*sums)[3 * i], (*sums)[3 * i + 1], (*sums)[3 * i + 2]);
    adasumScaledAdd(mine + at * esize, left ? c.a : c.b, theirs + at * esize, left ? c.b : c.a,
                    counts[i], dtype);
    at += counts[i];
  }
  return Status::ok();
}

}  // namespace

Status checkAdasumSize(int size) {
  if (size >= 1 && (size & (size - 1)) == 0) return Status::ok();
  return Status::invalidArgument(
      "Adasum runs on a power-of-two number of ranks (1, 2, 4, 8, ...), as Horovod's; this "
      "one has " +
      std::to_string(size));
}

Status checkAdasumType(DataType dtype) {
  if (adasumSupportsType(dtype)) return Status::ok();
  return Status::invalidArgument(std::string("Adasum reduces float16, float32 and float64 "
                                             "tensors, as Horovod's; got ") +
                                 dataTypeName(dtype));
}

Status allreduceAdasum(Transport& transport, void* buf, const std::vector<size_t>& counts,
                       DataType dtype, std::vector<uint8_t>* scratch) {
  const int n = transport.size();
  TUTTI_RETURN_IF_ERROR(checkAdasumSize(n));
  TUTTI_RETURN_IF_ERROR(checkAdasumType(dtype));
  if (n == 1) return Status::ok();
  const int rank = transport.rank();
  const size_t esize = dataTypeSize(dtype);
  auto* base = static_cast<uint8_t*>(buf);
  size_t my_count = total(counts);
  scratch->resize((my_count - my_count / 2) * esize);
  size_t offset = 0;                       // first element of this rank's segment
  std::vector<size_t> mine = counts;       // per tensor: elements of this rank's segment
  std::vector<std::vector<size_t>> given;  // per level: the partner's kept counts
  std::vector<size_t> lo, hi;
  std::vector<double> sums, incoming;
  // Vector halving, distance doubling.
  for (int level = 1; level < n; level <<= 1) {
    const bool left = (rank & level) == 0;
    const size_t first = my_count / 2;
    splitCounts(mine, first, &lo, &hi);
    const size_t keep = left ? first : my_count - first;
    const size_t keep_at = left ? offset : offset + first;
    const size_t give_at = left ? offset + first : offset;
    TUTTI_RETURN_IF_ERROR(exchange(transport, rank ^ level, base + give_at * esize,
                                   (my_count - keep) * esize, scratch->data(), keep * esize));
    offset = keep_at;
    my_count = keep;
    mine = left ? lo : hi;
    given.push_back(left ? hi : lo);
    TUTTI_RETURN_IF_ERROR(combine(transport, level, left, base + offset * esize, scratch->data(),
                                  mine, dtype, &sums, &incoming));
  }
  // Distance halving: the partners swap their combined segments.
  for (int level = n / 2; level >= 1; level >>= 1) {
    const bool left = (rank & level) == 0;
    const size_t theirs = total(given.back());
    given.pop_back();
    const size_t their_at = left ? offset + my_count : offset - theirs;
    TUTTI_RETURN_IF_ERROR(exchange(transport, rank ^ level, base + offset * esize, my_count * esize,
                                   base + their_at * esize, theirs * esize));
    if (!left) offset = their_at;
    my_count += theirs;
  }
  return Status::ok();
}

}  // namespace tutti
