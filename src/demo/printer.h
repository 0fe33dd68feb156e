// How `tessera demo` reads to a person: aligned tables, memory bars, lines of at most 100
// columns. Pure functions of the results (demo.h), so they are tested without a cluster.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "demo/demo.h"

namespace tessera::demo {

inline constexpr std::size_t kLineWidth = 100;

// Columns a terminal gives UTF-8 text: one per code point, two for East Asian wide ones.
std::size_t DisplayWidth(std::string_view text);

// Splits `text` at spaces into lines of at most `width` columns (a word longer than that gets a
// line of its own, cut).
std::vector<std::string> Wrap(std::string_view text, std::size_t width);

// `text` wrapped to kLineWidth: the first line after `first`, the others after `indent` spaces
// (`first` is padded to `indent` columns).
std::string Paragraph(std::string_view first, std::size_t indent, std::string_view text,
                      std::size_t width = kLineWidth);

// "[█████░░░░░]" with `width` cells: filled in proportion, at least one cell when anything is
// used, a free cell unless all of it is; past `total` every cell is filled and a '!' follows.
std::string Bar(std::uint64_t used, std::uint64_t total, int width);

// "14.93 GiB" (two decimals, always GiB: columns line up).
std::string GiB(std::uint64_t bytes);

// "━━ title ━━━…" to kLineWidth.
std::string Rule(std::string_view title);

class Table {
 public:
  enum class Align : std::uint8_t { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
    std::size_t max_width = 0;  // 0: as wide as its widest cell; else cells wrap to this
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void Add(std::vector<std::string> cells);  // missing cells are empty
  // The header and the rows, each line starting with `indent` spaces, no trailing spaces.
  std::string Render(std::size_t indent = 2) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// What the pod asked for, in the manifest's words ("4Gi + 60%", "1 whole GPU",
// "gpu-memory 2000 (KAI)").
std::string AskText(const PodSpec& spec);

// Free memory on GPUs that hold pods and have less free than the scenario's smallest memory
// ask: memory none of its pods could use.
std::uint64_t StrandedBytes(const ScenarioResult& result);
// GPUs of the scenario holding at least one pod.
int GpusUsed(const ScenarioResult& result);

std::string RenderBanner();
std::string RenderCluster(const DemoResult& result);
std::string RenderPolicy(const DemoResult& result);
std::string RenderScenario(const Scenario& scenario, const ScenarioResult& result, int index,
                           int count, bool gpu_present);
std::string RenderSummary(const DemoResult& result);

}  // namespace tessera::demo
