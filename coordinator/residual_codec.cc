#include "coordinator/residual_codec.h"

#include <cstring>
#include <map>
#include <string>

namespace tutti {
namespace {

constexpr char kMagic[4] = {'T', 'R', 'E', 'S'};
constexpr uint32_t kVersion = 1;

void put32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void putString(std::vector<uint8_t>* out, const std::string& s) {
  put32(out, static_cast<uint32_t>(s.size()));
  out->insert(out->end(), s.begin(), s.end());
}

// Reads from [p, end); every read checks the remaining length.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size), begin_(data) {}
  bool u32(uint32_t* v) { return uint(v, 4); }
  bool u64(uint64_t* v) { return uint(v, 8); }
  bool bytes(size_t n, const uint8_t** at) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    *at = p_;
    p_ += n;
    return true;
  }
  bool string(std::string* s) {
    uint32_t n = 0;
    const uint8_t* at = nullptr;
    if (!u32(&n) || !bytes(n, &at)) return false;
    s->assign(reinterpret_cast<const char*>(at), n);
    return true;
  }
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  bool done() const { return p_ == end_; }

 private:
  template <typename T>
  bool uint(T* v, int n) {
    if (end_ - p_ < n) return false;
    T out = 0;
    for (int i = 0; i < n; ++i) out |= static_cast<T>(p_[i]) << (8 * i);
    p_ += n;
    *v = out;
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* begin_;
};

}  // namespace

std::vector<uint8_t> encodeResiduals(const CompressionResiduals& residuals) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  put32(&out, kVersion);
  put32(&out, static_cast<uint32_t>(residuals.size()));
  for (const auto& [spec, tensors] : residuals) {
    putString(&out, spec);
    put32(&out, static_cast<uint32_t>(tensors.size()));
    // By name: the same residuals always encode to the same bytes.
    std::map<std::string, const std::vector<float>*> by_name;
    for (const auto& [name, values] : tensors) by_name[name] = &values;
    for (const auto& [name, values_ptr] : by_name) {
      const std::vector<float>& values = *values_ptr;
      putString(&out, name);
      put64(&out, values.size());
      size_t at = out.size();
      out.resize(at + values.size() * sizeof(float));
      if (!values.empty())
        std::memcpy(out.data() + at, values.data(), values.size() * sizeof(float));
    }
  }
  return out;
}

Status decodeResiduals(const uint8_t* data, size_t size, CompressionResiduals* out) {
  auto bad = [](const Reader& r, const std::string& what) {
    return Status::invalidArgument("compression residuals: " + what + " at byte " +
                                   std::to_string(r.offset()) +
                                   " (expected bytes from tutti_get_compression_residuals)");
  };
  Reader r(data, size);
  const uint8_t* magic = nullptr;
  uint32_t version = 0, n_specs = 0;
  if (size < 4 || std::memcmp(data, kMagic, 4) != 0) return bad(r, "no 'TRES' header");
  r.bytes(4, &magic);
  if (!r.u32(&version) || version != kVersion) {
    return bad(r, "version " + std::to_string(version) + " (this build reads version 1)");
  }
  if (!r.u32(&n_specs)) return bad(r, "truncated header");
  CompressionResiduals result;
  for (uint32_t s = 0; s < n_specs; ++s) {
    std::string spec;
    uint32_t n_tensors = 0;
    if (!r.string(&spec) || !r.u32(&n_tensors)) return bad(r, "truncated spec");
    ResidualMap& tensors = result[spec];
    for (uint32_t t = 0; t < n_tensors; ++t) {
      std::string name;
      uint64_t count = 0;
      const uint8_t* values = nullptr;
      if (!r.string(&name) || !r.u64(&count)) return bad(r, "truncated tensor entry");
      if (count > (SIZE_MAX / sizeof(float)) || !r.bytes(count * sizeof(float), &values)) {
        return bad(
            r, "tensor '" + name + "' claims " + std::to_string(count) + " values past the end");
      }
      std::vector<float> v(count);
      if (count > 0) std::memcpy(v.data(), values, count * sizeof(float));
      tensors[name] = std::move(v);
    }
  }
  if (!r.done()) return bad(r, "trailing bytes");
  *out = std::move(result);
  return Status::ok();
}

}  // namespace tutti
