// A hand-written SVG chart of GPU allocation against arrived GPU requests (no dependencies).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tessera::sim {

struct PlotSeries {
  std::string label;
  std::vector<std::optional<double>> y;  // per column x = 0, 1, ...; gaps allowed
};

// Line chart: x = arrived GPU requests (% of capacity), y = allocated GPU (% of capacity).
std::string PlotSvg(const std::vector<PlotSeries>& series, const std::string& title);

}  // namespace tessera::sim
