#include "tessera/prometheus.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "tessera/names.h"

namespace tessera::prom {
namespace {

const names::MetricInfo* Find(std::string_view name) {
  for (const names::MetricInfo& m : names::kAllMetrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string LabelText(const Labels& labels, std::string_view extra_key = {},
                      std::string_view extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](std::string_view k, std::string_view v) {
    if (!first) out += ',';
    first = false;
    out.append(k).append("=\"").append(EscapeLabelValue(v)).append("\"");
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (!extra_key.empty()) add(extra_key, extra_value);
  return out + "}";
}

}  // namespace

void Histogram::Observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(std::llround(seconds * 1e9)),
                    std::memory_order_relaxed);
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 9.0e15) {
    return std::to_string(static_cast<long long>(value));
  }
  // Fixed notation in the usual range ("0.0001", as Prometheus' own clients write bucket bounds).
  char buffer[400];
  const double magnitude = std::fabs(value);
  auto [end, ec] =
      magnitude >= 1e-6 && magnitude < 1e15
          ? std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed)
          : std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : "NaN";
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void Exposition::Add(std::string_view name, const Labels& labels, double value) {
  const names::MetricInfo* m = Find(name);
  if (m == nullptr || m->type == "histogram") {
    ++unknown_;
    return;
  }
  lines_[m->name]
      .append(m->name)
      .append(LabelText(labels))
      .append(" ")
      .append(FormatValue(value))
      .append("\n");
}

void Exposition::Add(std::string_view name, const Labels& labels, const Histogram& h) {
  const names::MetricInfo* m = Find(name);
  if (m == nullptr || m->type != "histogram") {
    ++unknown_;
    return;
  }
  std::string& out = lines_[m->name];
  const std::string base(m->name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i) {
    cumulative += h.Bucket(i);
    out += base + "_bucket" + LabelText(labels, "le", FormatValue(Histogram::kBounds[i])) + " " +
           std::to_string(cumulative) + "\n";
  }
  // Buckets and count are read one after the other while observations go on: +Inf and _count
  // are never below the last finite bucket.
  const std::uint64_t count = std::max(h.Count(), cumulative);
  out += base + "_bucket" + LabelText(labels, "le", "+Inf") + " " + std::to_string(count) + "\n";
  out += base + "_sum" + LabelText(labels) + " " + FormatValue(h.Sum()) + "\n";
  out += base + "_count" + LabelText(labels) + " " + std::to_string(count) + "\n";
}

std::string Exposition::Text() const {
  std::string out;
  for (const names::MetricInfo& m : names::kAllMetrics) {
    auto it = lines_.find(m.name);
    if (it == lines_.end()) continue;
    out.append("# HELP ").append(m.name).append(" ").append(m.help).append("\n");
    out.append("# TYPE ").append(m.name).append(" ").append(m.type).append("\n");
    out += it->second;
  }
  return out;
}

StatusOr<std::vector<Sample>> ParseExposition(std::string_view text) {
  std::vector<Sample> samples;
  int line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const auto bad = [&](const std::string& why) {
      return InvalidArgumentError("metrics line " + std::to_string(line_no) + ": " + why +
                                  " (expected name{label=\"value\",...} number)");
    };
    Sample s;
    std::size_t i = 0;
    while (i < line.size() &&
           (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_' || line[i] == ':'))
      ++i;
    if (i == 0) return bad("no metric name");
    s.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (true) {
        while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        const std::size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          return bad("a label is not key=\"value\"");
        }
        std::string key(line.substr(i, eq - i)), value;
        i = eq + 2;
        bool closed = false;
        while (i < line.size()) {
          const char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\' && i < line.size()) {
            const char e = line[i++];
            value += e == 'n' ? '\n' : e;
          } else {
            value += c;
          }
        }
        if (!closed) return bad("unterminated label value");
        s.labels[key] = value;
      }
    }
    while (i < line.size() && line[i] == ' ') ++i;
    std::string_view number = line.substr(i);
    if (const std::size_t space = number.find(' '); space != std::string_view::npos) {
      number = number.substr(0, space);  // a timestamp follows
    }
    if (number == "NaN") {
      s.value = std::numeric_limits<double>::quiet_NaN();
    } else if (number == "+Inf") {
      s.value = std::numeric_limits<double>::infinity();
    } else if (number == "-Inf") {
      s.value = -std::numeric_limits<double>::infinity();
    } else {
      auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), s.value);
      if (ec != std::errc() || end != number.data() + number.size() || number.empty()) {
        return bad("value \"" + std::string(number) + "\" is not a number");
      }
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace tessera::prom
