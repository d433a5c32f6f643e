#include "compression/compressor_factory.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "compression/cast_compressor.h"
#include "compression/int8_compressor.h"
#include "compression/none_compressor.h"
#include "compression/topk_compressor.h"

namespace tutti {

namespace {

std::string normalise(const std::string& spec) {
  size_t begin = 0;
  size_t end = spec.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(spec[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(spec[end - 1]))) --end;
  std::string s = spec.substr(begin, end - begin);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status badSpec(const std::string& spec, const std::string& why) {
  return Status::invalidArgument("compression '" + spec + "': " + why +
                                 "; accepted: " + compressorSpecHelp());
}

// A decimal number and nothing else (no sign, hex, inf or nan).
bool parseRatio(const std::string& text, double* ratio) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != '-' &&
        c != '+') {
      return false;
    }
  }
  if (!std::isdigit(static_cast<unsigned char>(text[0])) && text[0] != '.') return false;
  errno = 0;
  char* end = nullptr;
  *ratio = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(*ratio);
}

bool parseBlockSize(const std::string& text, uint64_t* value) {
  if (text.empty() || text.size() > 9) return false;
  *value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    *value = *value * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

}  // namespace

const char* compressorSpecHelp() {
  return "none, fp16, bf16, topk:<ratio in (0, 1]> (e.g. topk:0.01), int8 (blocks of 256) or "
         "int8:<block size in [1, 16777216]>";
}

Status makeCompressor(const std::string& spec, std::unique_ptr<Compressor>* out) {
  const std::string s = normalise(spec);
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? s.substr(colon + 1) : std::string();

  if (kind == "none" || kind.empty() || kind == "fp16" || kind == "bf16") {
    if (has_arg) return badSpec(spec, "'" + kind + "' takes no parameter");
    if (kind == "fp16") {
      *out = std::make_unique<CastCompressor>(DataType::kFloat16);
    } else if (kind == "bf16") {
      *out = std::make_unique<CastCompressor>(DataType::kBFloat16);
    } else {
      *out = std::make_unique<NoneCompressor>();
    }
    return Status::ok();
  }
  if (kind == "topk") {
    if (!has_arg) return badSpec(spec, "topk needs a ratio, e.g. topk:0.01");
    double ratio = 0.0;
    if (!parseRatio(arg, &ratio)) return badSpec(spec, "'" + arg + "' is not a number");
    if (!(ratio > 0.0 && ratio <= 1.0)) {
      return badSpec(spec, "the topk ratio must be in (0, 1], got " + arg);
    }
    *out = std::make_unique<TopKCompressor>(ratio);
    return Status::ok();
  }
  if (kind == "int8") {
    uint64_t block = Int8Compressor::kDefaultBlockSize;
    if (has_arg && !parseBlockSize(arg, &block)) {
      return badSpec(spec, "'" + arg + "' is not a block size (a whole number)");
    }
    if (block < 1 || block > Int8Compressor::kMaxBlockSize) {
      return badSpec(spec, "the int8 block size must be in [1, 16777216], got " + arg);
    }
    *out = std::make_unique<Int8Compressor>(static_cast<uint32_t>(block));
    return Status::ok();
  }
  return badSpec(spec, "unknown compressor '" + kind + "'");
}

}  // namespace tutti
