#include "sim/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tessera::sim {

double PairwiseSum(std::span<const double> a) {
  const std::size_t n = a.size();
  if (n < 8) {
    double res = 0.;
    for (const double v : a) res += v;
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return PairwiseSum(a.subspan(0, half)) + PairwiseSum(a.subspan(half));
}

double NumpyMean(std::span<const double> values) {
  return PairwiseSum(values) / static_cast<double>(values.size());
}

double NumpyRound2(double x) { return std::nearbyint(x * 100.0) / 100.0; }

double PythonRound(double x, int digits) {
  if (digits == 0) return std::nearbyint(x);
  // printf rounds the exact binary value (ties to even); strtod returns the nearest double.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return std::strtod(buf, nullptr);
}

Curve Discretise(std::span<const EventRecord> events, std::int64_t total_gpus, int max_column) {
  const auto columns = static_cast<std::size_t>(max_column) + 1;
  // Rows per arrival bucket, in event order; bucket max+1 only serves as column max's neighbour.
  std::vector<std::vector<double>> alloc(columns + 1), frag(columns + 1), ratio(columns + 1);
  const auto gpus = static_cast<double>(total_gpus);
  for (const EventRecord& e : events) {
    const double arrive = PythonRound(static_cast<double>(e.arrived_milli) / gpus / 10, 0);
    if (arrive < 0 || arrive > static_cast<double>(columns)) continue;
    const auto x = static_cast<std::size_t>(arrive);
    alloc[x].push_back(PythonRound(static_cast<double>(e.used_milli) / gpus / 10, 2));
    frag[x].push_back(PythonRound(e.frag_milli, 2));
    ratio[x].push_back(e.idle_milli > 0
                           ? PythonRound(100 * e.frag_milli / static_cast<double>(e.idle_milli), 2)
                           : 0.0);
  }
  Curve c;
  c.alloc.resize(columns);
  c.frag.resize(columns);
  c.frag_ratio.resize(columns);
  auto rows = [&](const std::vector<std::vector<double>>& b, std::size_t x) {
    if (!b[x].empty()) return b[x];
    std::vector<double> out;
    if (x > 0) out.insert(out.end(), b[x - 1].begin(), b[x - 1].end());
    if (x + 1 < b.size()) out.insert(out.end(), b[x + 1].begin(), b[x + 1].end());
    return out;
  };
  for (std::size_t x = 0; x < columns; ++x) {
    const std::vector<double> a = rows(alloc, x);
    if (a.empty()) continue;
    c.alloc[x] = NumpyRound2(NumpyMean(a));
    const std::vector<double> f = rows(frag, x);
    c.frag[x] = NumpyRound2(100 * NumpyMean(f) / 1000 / gpus);
    c.frag_ratio[x] = NumpyMean(rows(ratio, x));
  }
  return c;
}

}  // namespace tessera::sim
