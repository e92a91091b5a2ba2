#include "train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/xml_text.h"

namespace spillway::train {

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string loss_plot_svg(const LossCurves& c) {
  const double W = 720, H = 420, left = 64, right = 20, top = 40, bottom = 48;
  double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
  for (const auto* series : {&c.train, &c.validation}) {
    for (auto [x, y] : *series) {
      x1 = std::max(x1, x);
      if (std::isfinite(y)) {
        y0 = std::min(y0, y);
        y1 = std::max(y1, y);
      }
    }
  }
  if (!std::isfinite(y0)) { y0 = 0; y1 = 1; }
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  const double pad = 0.05 * (y1 - y0);
  y0 = std::max(0.0, y0 - pad);
  y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", W) + "\" height=\"" +
                    fmt("%.0f", H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fmt("%.0f", W / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
         xml_escaped(c.title) + "</text>\n";
  for (int i = 0; i <= 5; ++i) {  // grid and axis labels
    double y = y0 + (y1 - y0) * i / 5.0, x = x0 + (x1 - x0) * i / 5.0;
    svg += "<line x1=\"" + fmt("%.1f", left) + "\" x2=\"" + fmt("%.1f", W - right) + "\" y1=\"" +
           fmt("%.1f", py(y)) + "\" y2=\"" + fmt("%.1f", py(y)) + "\" stroke=\"#ddd\"/>\n";
    svg += "<text x=\"" + fmt("%.1f", left - 6) + "\" y=\"" + fmt("%.1f", py(y) + 4) +
           "\" text-anchor=\"end\">" + fmt("%.2f", y) + "</text>\n";
    svg += "<text x=\"" + fmt("%.1f", px(x)) + "\" y=\"" + fmt("%.1f", H - bottom + 18) +
           "\" text-anchor=\"middle\">" + fmt("%.0f", x) + "</text>\n";
  }
  svg += "<text x=\"" + fmt("%.0f", W / 2) + "\" y=\"" + fmt("%.0f", H - 8) + "\" text-anchor=\"middle\">step</text>\n";
  svg += "<text transform=\"translate(16," + fmt("%.0f", H / 2) + ") rotate(-90)\" text-anchor=\"middle\">loss</text>\n";
  auto polyline = [&](const std::vector<std::pair<double, double>>& pts, const char* color, const char* label,
                      double legend_y) {
    if (pts.empty()) return;
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.6\" points=\"";
    for (auto [x, y] : pts) {
      if (std::isfinite(y)) svg += fmt("%.1f", px(x)) + "," + fmt("%.1f", py(y)) + " ";
    }
    svg += "\"/>\n";
    svg += "<line x1=\"" + fmt("%.0f", W - 170) + "\" x2=\"" + fmt("%.0f", W - 150) + "\" y1=\"" +
           fmt("%.0f", legend_y) + "\" y2=\"" + fmt("%.0f", legend_y) + "\" stroke=\"" + color +
           "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + fmt("%.0f", W - 144) + "\" y=\"" + fmt("%.0f", legend_y + 4) + "\">" + label + "</text>\n";
  };
  polyline(c.train, "#1f77b4", "train loss", top + 14);
  polyline(c.validation, "#d62728", "validation loss", top + 32);
  svg += "</svg>\n";
  return svg;
}

}  // namespace spillway::train
