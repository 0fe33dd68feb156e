// Prometheus text exposition (format 0.0.4): a writer that only knows the metric families of
// names::kAllMetrics (one list: a family cannot be emitted without its documented row), a
// latency histogram, and a parser for the same text (`tessera top --from`, tests).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera::prom {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// Fixed-bucket histogram of seconds, safe to observe from many threads.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5};
  void Observe(double seconds);
  std::uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  double Sum() const { return static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9; }
  std::uint64_t Bucket(std::size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<std::uint64_t>, kBounds.size()> buckets_{};  // not cumulative
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_ns_{0};
};

class Exposition {
 public:
  // One sample of family `name` (a row of names::kAllMetrics; anything else is dropped and
  // counted in unknown()). Samples of a family may come in any order; Text() groups them.
  void Add(std::string_view name, const Labels& labels, double value);
  void Add(std::string_view name, const Labels& labels, const Histogram& h);
  // HELP and TYPE once per family that has samples, families in kAllMetrics order.
  std::string Text() const;
  int unknown() const { return unknown_; }

 private:
  std::map<std::string_view, std::string> lines_;  // by family
  int unknown_ = 0;
};

// "1", "0.25", "NaN", "+Inf": the shortest text that reads back to the same double.
std::string FormatValue(double value);
// A label value with \, " and newline escaped.
std::string EscapeLabelValue(std::string_view value);

struct Sample {
  std::string name;  // as written, e.g. tessera_scheduler_request_seconds_bucket
  std::map<std::string, std::string> labels;
  double value = 0;
};
// Parses exposition text (comments skipped). An error names the line and what is accepted.
StatusOr<std::vector<Sample>> ParseExposition(std::string_view text);

}  // namespace tessera::prom
