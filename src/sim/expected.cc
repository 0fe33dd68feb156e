#include "sim/expected.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tessera/file.h"

namespace tessera::sim {

StatusOr<std::vector<PublishedRow>> LoadPublishedCsv(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  std::istringstream in(text);
  std::string line;
  std::vector<std::string> header;
  std::vector<PublishedRow> rows;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    if (line.back() == ',') f.emplace_back();
    if (header.empty()) {
      header = f;
      continue;
    }
    if (f.size() != header.size()) {
      return InvalidInputError(path + ":" + std::to_string(line_no) + ": " +
                               std::to_string(f.size()) + " fields, the header has " +
                               std::to_string(header.size()));
    }
    PublishedRow row;
    std::size_t first_col = header.size();
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == "workload") row.workload = f[i];
      if (header[i] == "sc_policy") row.sc_policy = f[i];
      if (header[i] == "seed") row.seed = std::strtoll(f[i].c_str(), nullptr, 10);
      if (header[i] == "0" && first_col == header.size()) first_col = i;
    }
    for (std::size_t i = first_col; i < header.size(); ++i) {
      if (f[i].empty()) {
        row.columns.emplace_back();
      } else {
        row.columns.emplace_back(std::strtod(f[i].c_str(), nullptr));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tessera::sim
