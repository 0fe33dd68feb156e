// The published metrics (spec §6): per-event records discretised onto the arrival axis 0..130
// with pandas/numpy semantics (pairwise mean, half-even rounding).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tessera::sim {

// numpy's pairwise summation (np.add.reduce on a contiguous float64 array).
double PairwiseSum(std::span<const double> values);
// numpy's mean: PairwiseSum / n.
double NumpyMean(std::span<const double> values);
// numpy.round(x, 2): rint(x * 100) / 100 (half to even after scaling).
double NumpyRound2(double x);
// Python round(x, digits) for a float: the exact binary value correctly rounded, ties to even.
double PythonRound(double x, int digits);

struct EventRecord {
  std::int64_t arrived_milli = 0;  // cumulative GPU milli requested, failed pods included
  std::int64_t used_milli = 0;     // cumulative GPU milli placed
  double frag_milli = 0;           // cluster fragmentation (sum of F over nodes)
  std::int64_t idle_milli = 0;     // cluster free GPU milli
};

struct Curve {
  std::vector<std::optional<double>> alloc;       // percent of capacity, per column
  std::vector<std::optional<double>> frag;        // fragmented milli, percent of capacity
  std::vector<std::optional<double>> frag_ratio;  // fragmented share of idle GPU, percent
};

// Columns 0..max_column (130 in the paper).
Curve Discretise(std::span<const EventRecord> events, std::int64_t total_gpus,
                 int max_column = 130);

}  // namespace tessera::sim
