#include "core/compression_spec.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

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
                                 "; accepted: " + compressionSpecHelp());
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

bool parseWholeNumber(const std::string& text, uint64_t* value) {
  if (text.empty() || text.size() > 9) return false;
  *value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    *value = *value * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

}  // namespace

const char* compressionSpecHelp() {
  return "none, fp16, bf16, fp16:cross_host, bf16:cross_host, topk:<ratio in (0, 1]> (e.g. "
         "topk:0.01), "
         "topk:<ratio>:warmup=<steps> (e.g. topk:0.01:warmup=100), int8 (blocks of 256) or "
         "int8:<block size in [1, 16777216]>";
}

Status parseCompressionSpec(const std::string& spec, CompressionSpec* out) {
  const std::string s = normalise(spec);
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? s.substr(colon + 1) : std::string();
  CompressionSpec parsed;

  if (kind == "none" || kind.empty() || kind == "fp16" || kind == "bf16") {
    const bool cast = kind == "fp16" || kind == "bf16";
    if (has_arg && !(cast && arg == "cross_host")) {
      return badSpec(spec, cast ? "'" + kind + "' takes no parameter but cross_host"
                                : "'" + kind + "' takes no parameter");
    }
    parsed.cross_host = has_arg;
    parsed.kind = kind == "fp16"   ? CompressionSpec::Kind::kFp16
                  : kind == "bf16" ? CompressionSpec::Kind::kBf16
                                   : CompressionSpec::Kind::kNone;
  } else if (kind == "topk") {
    if (!has_arg) return badSpec(spec, "topk needs a ratio, e.g. topk:0.01");
    const size_t option = arg.find(':');
    const std::string ratio = arg.substr(0, option);
    if (option != std::string::npos) {
      const std::string text = arg.substr(option + 1);
      const std::string key = "warmup=";
      uint64_t steps = 0;
      if (text.compare(0, key.size(), key) != 0 ||
          !parseWholeNumber(text.substr(key.size()), &steps)) {
        return badSpec(spec, "'" + text + "' is not warmup=<steps> (a whole number)");
      }
      parsed.warmup = static_cast<uint32_t>(steps);  // at most 9 digits
    }
    if (!parseRatio(ratio, &parsed.ratio)) {
      return badSpec(spec, "the topk ratio must be a number in (0, 1], got '" + ratio + "'");
    }
    if (!(parsed.ratio > 0.0 && parsed.ratio <= 1.0)) {
      return badSpec(spec, "the topk ratio must be in (0, 1], got " + ratio);
    }
    parsed.kind = CompressionSpec::Kind::kTopK;
  } else if (kind == "int8") {
    uint64_t block = CompressionSpec::kDefaultInt8Block;
    if (has_arg && !parseWholeNumber(arg, &block)) {
      return badSpec(spec, "'" + arg + "' is not a block size (a whole number)");
    }
    if (block < 1 || block > CompressionSpec::kMaxInt8Block) {
      return badSpec(spec, "the int8 block size must be in [1, 16777216], got " + arg);
    }
    parsed.kind = CompressionSpec::Kind::kInt8;
    parsed.block = static_cast<uint32_t>(block);
  } else {
    return badSpec(spec, "unknown compressor '" + kind + "'");
  }
  *out = parsed;
  return Status::ok();
}

std::string canonicalCompressionSpec(const CompressionSpec& spec) {
  switch (spec.kind) {
    case CompressionSpec::Kind::kNone:
      return "none";
    case CompressionSpec::Kind::kFp16:
      return spec.cross_host ? "fp16:cross_host" : "fp16";
    case CompressionSpec::Kind::kBf16:
      return spec.cross_host ? "bf16:cross_host" : "bf16";
    case CompressionSpec::Kind::kTopK: {
      // Shortest decimal that reads back as the same double.
      char buf[32];
      for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof(buf), "%.*g", precision, spec.ratio);
        if (std::strtod(buf, nullptr) == spec.ratio) break;
      }
      return std::string("topk:") + buf +
             (spec.warmup > 0 ? ":warmup=" + std::to_string(spec.warmup) : std::string());
    }
    case CompressionSpec::Kind::kInt8:
      return "int8:" + std::to_string(spec.block);
  }
  return "none";
}

Status canonicalizeCompressionSpec(const std::string& spec, std::string* canonical) {
  CompressionSpec parsed;
  TUTTI_RETURN_IF_ERROR(parseCompressionSpec(spec, &parsed));
  *canonical = canonicalCompressionSpec(parsed);
  return Status::ok();
}

}  // namespace tutti
