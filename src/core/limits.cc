#include "tessera/limits.h"

#include <charconv>
#include <cstdio>
#include <cstring>

#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/text.h"

namespace tessera {
namespace {

constexpr std::string_view kLimitsForm =
    "accepted lines: 'version 1', 'pod UID NAMESPACE/NAME CONTAINER', "
    "'enforcement fail-open|fail-closed', 'priority CLASS', 'mode MODE', 'compute hard "
    "[window=MS]|work-conserving', "
    "'device UUID memory=BYTES [cores=PERCENT] [context=BYTES] [stream=BYTES]', comments (#)";

Status LineError(std::size_t line, std::string_view what) {
  return InvalidArgumentError("limits file line " + std::to_string(line) + ": " +
                              std::string(what) + "; " + std::string(kLimitsForm));
}

}  // namespace

bool IsComputeWindowMs(std::uint64_t ms) {
  return ms >= kMinComputeWindowMs && ms <= kMaxComputeWindowMs;
}

std::optional<std::uint32_t> ParseComputeWindowMs(std::string_view text) {
  std::uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size() || !IsComputeWindowMs(ms))
    return std::nullopt;
  return static_cast<std::uint32_t>(ms);
}

std::string ComputeWindowRange() {
  return std::to_string(kMinComputeWindowMs) + "-" + std::to_string(kMaxComputeWindowMs);
}

StatusOr<Limits> ParseLimitsFile(std::string_view text) {
  Limits limits;
  bool have_version = false;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto words = SplitWords(line);
    if (words.empty() || words[0].front() == '#') continue;
    for (char c : line) {
      if (static_cast<unsigned char>(c) >= 0x80 ||
          (static_cast<unsigned char>(c) < 0x20 && c != '\t')) {
        return LineError(line_no, "contains a non-ASCII or control byte");
      }
    }
    const std::string_view key = words[0];
    if (key == "version") {
      if (words.size() != 2 || words[1] != "1") {
        return LineError(line_no, "version must be 1 (this library reads limits file version 1)");
      }
      have_version = true;
    } else if (!have_version) {
      return LineError(line_no, "the first line must be 'version 1'");
    } else if (key == "pod") {
      if (words.size() != 4) return LineError(line_no, "pod needs UID NAMESPACE/NAME CONTAINER");
      limits.pod_uid = words[1];
      limits.pod = words[2];
      limits.container = words[3];
    } else if (key == "enforcement") {
      if (words.size() != 2 || (words[1] != "fail-open" && words[1] != "fail-closed")) {
        return LineError(line_no, "enforcement must be fail-open or fail-closed");
      }
      limits.fail_closed = words[1] == "fail-closed";
    } else if (key == "priority") {
      if (words.size() != 2) return LineError(line_no, "priority needs one class");
      auto p = ParsePriorityClass(words[1]);
      if (!p.ok()) return LineError(line_no, p.status().message());
      limits.priority = *p;
    } else if (key == "mode") {
      if (words.size() != 2) return LineError(line_no, "mode needs one mode");
      auto m = ParseSharingMode(words[1]);
      if (!m.ok()) return LineError(line_no, m.status().message());
      limits.mode = *m;
    } else if (key == "compute") {
      if (words.size() != 2 && words.size() != 3) {
        return LineError(line_no, "compute needs one of: " + AcceptedComputeModes() +
                                      " (hard may add window=MS)");
      }
      auto c = ParseComputeMode(words[1]);
      if (!c.ok()) return LineError(line_no, c.status().message());
      limits.compute = *c;
      limits.compute_window_ms = 0;
      if (words.size() == 3) {
        const std::string_view w = words[2];
        const auto ms = w.starts_with("window=") ? ParseComputeWindowMs(w.substr(7)) : std::nullopt;
        if (*c != ComputeMode::kHard || !ms) {
          return LineError(line_no, "\"" + QuoteForMessage(w) +
                                        "\": only compute hard takes window=MS, " +
                                        ComputeWindowRange() + " ms");
        }
        limits.compute_window_ms = *ms;
      }
    } else if (key == "device") {
      if (words.size() < 3) return LineError(line_no, "device needs UUID and memory=BYTES");
      DeviceLimits d;
      d.uuid = words[1];
      if (d.uuid.size() >= 64) return LineError(line_no, "device UUID longer than 63 bytes");
      bool have_memory = false;
      for (std::size_t i = 2; i < words.size(); ++i) {
        const std::size_t eq = words[i].find('=');
        if (eq == std::string_view::npos) {
          return LineError(line_no,
                           "device field \"" + QuoteForMessage(words[i]) + "\" is not key=value");
        }
        const std::string_view k = words[i].substr(0, eq), v = words[i].substr(eq + 1);
        if (k == "memory") {
          auto n = ParseUnsigned(v, kMaxQuantity);
          if (!n.ok())
            return LineError(line_no, "memory=\"" + QuoteForMessage(v) + "\" is not a byte count");
          d.memory_bytes = *n;
          have_memory = true;
        } else if (k == "cores") {
          auto n = ParseUnsigned(v, 100);
          if (!n.ok())
            return LineError(line_no, "cores=\"" + QuoteForMessage(v) + "\" is not 0-100");
          d.cores_percent = static_cast<std::uint32_t>(*n);
        } else if (k == "context") {
          auto n = ParseUnsigned(v, kMaxQuantity);
          if (!n.ok())
            return LineError(line_no, "context=\"" + QuoteForMessage(v) + "\" is not a byte count");
          d.context_bytes = *n;
        } else if (k == "stream") {
          auto n = ParseUnsigned(v, kMaxQuantity);
          if (!n.ok())
            return LineError(line_no, "stream=\"" + QuoteForMessage(v) + "\" is not a byte count");
          d.stream_bytes = *n;
        } else {
          return LineError(line_no, "unknown device field \"" + QuoteForMessage(k) + "\"");
        }
      }
      if (!have_memory) return LineError(line_no, "device needs memory=BYTES");
      for (const auto& other : limits.devices) {
        if (other.uuid == d.uuid)
          return LineError(line_no, "device " + d.uuid + " is listed twice");
      }
      if (limits.devices.size() >= 16) return LineError(line_no, "more than 16 devices");
      limits.devices.push_back(std::move(d));
    } else {
      return LineError(line_no, "unknown keyword \"" + QuoteForMessage(key) + "\"");
    }
  }
  if (!have_version)
    return InvalidArgumentError("limits file is empty; " + std::string(kLimitsForm));
  return limits;
}

std::string FormatLimitsFile(const Limits& l) {
  std::string out = "# tessera limits v1 - written by the node side; do not edit\nversion 1\n";
  if (!l.pod_uid.empty()) out += "pod " + l.pod_uid + " " + l.pod + " " + l.container + "\n";
  out += std::string("enforcement ") + (l.fail_closed ? "fail-closed" : "fail-open") + "\n";
  out += "priority " + std::string(Name(l.priority)) + "\n";
  out += "mode " + std::string(Name(l.mode)) + "\n";
  out += "compute " + std::string(Name(l.compute));
  if (l.compute_window_ms != 0) out += " window=" + std::to_string(l.compute_window_ms);
  out += "\n";
  for (const auto& d : l.devices) {
    out += "device " + d.uuid + " memory=" + std::to_string(d.memory_bytes);
    if (d.cores_percent != 0) out += " cores=" + std::to_string(d.cores_percent);
    if (d.context_bytes != 0) out += " context=" + std::to_string(d.context_bytes);
    if (d.stream_bytes != 0) out += " stream=" + std::to_string(d.stream_bytes);
    out += "\n";
  }
  return out;
}

std::optional<std::uint64_t> HamiLimits::ForIndex(int index) const {
  for (const auto& [i, bytes] : per_index) {
    if (i == index) return bytes;
  }
  return all_devices_bytes;
}

StatusOr<std::uint64_t> ParseHamiMemory(std::string_view text) {
  static constexpr std::string_view kForm =
      "accepted: a whole number with an optional suffix g, m or k (GiB, MiB, KiB), e.g. 4096m or "
      "4g";
  if (text.empty()) return InvalidArgumentError("is empty; " + std::string(kForm));
  std::uint64_t unit = 1;
  std::string_view digits = text;
  switch (text.back()) {
    case 'g':
    case 'G':
      unit = kGiB;
      digits.remove_suffix(1);
      break;
    case 'm':
    case 'M':
      unit = kMiB;
      digits.remove_suffix(1);
      break;
    case 'k':
    case 'K':
      unit = kKiB;
      digits.remove_suffix(1);
      break;
    default:
      break;
  }
  auto n = ParseUnsigned(digits, kMaxQuantity / unit);
  if (!n.ok()) {
    return InvalidArgumentError(
        "\"" + QuoteForMessage(text) + "\" is " +
        (n.status().message() == "too large" ? "too large" : "not a HAMi memory size") + "; " +
        std::string(kForm));
  }
  return *n * unit;
}

StatusOr<HamiLimits> ParseHamiEnvironment(const char* const* environment) {
  HamiLimits out;
  const std::string all(names::kEnvHamiMemoryLimit);
  const std::string prefix(names::kEnvHamiMemoryLimitPrefix);
  const std::string sm(names::kEnvHamiSmLimit);
  for (const char* const* e = environment; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = entry.substr(0, eq), value = entry.substr(eq + 1);
    if (key == all) {
      auto bytes = ParseHamiMemory(value);
      if (!bytes.ok()) return bytes.status().WithContext(all);
      out.all_devices_bytes = *bytes;
    } else if (key.size() > prefix.size() && key.substr(0, prefix.size()) == prefix) {
      auto index = ParseUnsigned(key.substr(prefix.size()), 1023);
      if (!index.ok()) continue;  // some other variable sharing the prefix
      auto bytes = ParseHamiMemory(value);
      if (!bytes.ok()) return bytes.status().WithContext(std::string(key));
      out.per_index.emplace_back(static_cast<int>(*index), *bytes);
    } else if (key == sm) {
      auto percent = ParseUnsigned(value, 100);
      if (!percent.ok()) {
        return InvalidArgumentError(sm + ": \"" + QuoteForMessage(value) +
                                    "\" is not a percentage; accepted: 0 to 100");
      }
      out.sm_percent = static_cast<std::uint32_t>(*percent);
    }
  }
  return out;
}

std::string FormatGpuUuid(const unsigned char* b) {
  char out[48];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

}  // namespace tessera
