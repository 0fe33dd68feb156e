#include "sim/plot.h"

#include <algorithm>
#include <cstdio>

namespace tessera::sim {
namespace {

constexpr double kWidth = 760, kHeight = 480;
constexpr double kLeft = 64, kRight = 170, kTop = 40, kBottom = 56;
constexpr const char* kColors[] = {"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c",
                                   "#9467bd", "#d62728", "#8c564b", "#e377c2"};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string PlotSvg(const std::vector<PlotSeries>& series, const std::string& title) {
  std::size_t max_x = 1;
  for (const PlotSeries& s : series) max_x = std::max(max_x, s.y.size() - (s.y.empty() ? 0 : 1));
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + pw * x / static_cast<double>(max_x); };
  auto py = [&](double y) { return kTop + ph * (1 - y / 100.0); };
  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(kWidth) + "\" height=\"" +
         Num(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + Num(kLeft) + "\" y=\"24\" font-size=\"15\">" + Escape(title) + "</text>\n";
  for (int y = 0; y <= 100; y += 20) {
    svg += "<line x1=\"" + Num(kLeft) + "\" x2=\"" + Num(kLeft + pw) + "\" y1=\"" + Num(py(y)) +
           "\" y2=\"" + Num(py(y)) + "\" stroke=\"#ddd\"/>\n";
    svg += "<text x=\"" + Num(kLeft - 8) + "\" y=\"" + Num(py(y) + 4) + "\" text-anchor=\"end\">" +
           std::to_string(y) + "</text>\n";
  }
  for (std::size_t x = 0; x <= max_x; x += 10) {
    svg += "<line x1=\"" + Num(px(static_cast<double>(x))) + "\" x2=\"" +
           Num(px(static_cast<double>(x))) + "\" y1=\"" + Num(kTop) + "\" y2=\"" + Num(kTop + ph) +
           "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + Num(px(static_cast<double>(x))) + "\" y=\"" + Num(kTop + ph + 16) +
           "\" text-anchor=\"middle\">" + std::to_string(x) + "</text>\n";
  }
  svg += "<rect x=\"" + Num(kLeft) + "\" y=\"" + Num(kTop) + "\" width=\"" + Num(pw) +
         "\" height=\"" + Num(ph) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + Num(kLeft + pw / 2) + "\" y=\"" + Num(kHeight - 14) +
         "\" text-anchor=\"middle\">arrived GPU requests (% of cluster GPU capacity)</text>\n";
  svg += "<text transform=\"translate(18," + Num(kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">GPU allocation (%)</text>\n";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const std::string color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points;
    for (std::size_t x = 0; x < series[i].y.size(); ++x) {
      if (!series[i].y[x].has_value()) continue;
      points += Num(px(static_cast<double>(x))) + "," +
                Num(py(std::clamp(*series[i].y[x], 0.0, 100.0))) + " ";
    }
    svg += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.6\" points=\"" +
           points + "\"/>\n";
    const double ly = kTop + 14 + 20 * static_cast<double>(i);
    svg += "<line x1=\"" + Num(kWidth - kRight + 14) + "\" x2=\"" + Num(kWidth - kRight + 38) +
           "\" y1=\"" + Num(ly) + "\" y2=\"" + Num(ly) + "\" stroke=\"" + color +
           "\" stroke-width=\"3\"/>\n";
    svg += "<text x=\"" + Num(kWidth - kRight + 44) + "\" y=\"" + Num(ly + 4) + "\">" +
           Escape(series[i].label) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera::sim
