#include "plan/timeline_svg.h"

#include <algorithm>
#include <cstdio>

#include "base/xml_text.h"

namespace spillway::plan {


std::string timeline_svg(const std::vector<TimelineBar>& bars, const std::string& title) {
  const double width = 1200, left = 110, row = 34, top = 40;
  double total = 1e-12;
  double busy[3] = {0, 0, 0};
  for (const auto& b : bars) {
    total = std::max(total, b.end);
    busy[std::clamp(b.row, 0, 2)] += b.end - b.start;
  }
  auto x = [&](double t) { return left + t / total * (width - left - 20); };
  char buf[512];
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"170\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf, "<text x=\"10\" y=\"22\" font-size=\"14\">%s (step %.1f ms)</text>\n",
                xml_escaped(title).c_str(), total * 1e3);
  svg += buf;
  const char* rows[] = {"compute", "host→device", "device→host"};
  for (int i = 0; i < 3; ++i) {
    std::snprintf(buf, sizeof buf, "<text x=\"10\" y=\"%.0f\">%s</text><text x=\"10\" y=\"%.0f\" font-size=\"9\">busy %.0f%%</text>\n",
                  top + row * i + 14, rows[i], top + row * i + 26, 100.0 * busy[i] / total);
    svg += buf;
  }
  const char* colors[] = {"#aec7e8", "#2ca02c", "#d62728"};
  for (const auto& b : bars) {
    const int r = std::clamp(b.row, 0, 2);
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"24\" fill=\"%s\"><title>%s</title></rect>\n",
                  x(b.start), top + row * r, std::max(0.3, x(b.end) - x(b.start)),
                  r == 0 && b.heavy ? "#1f77b4" : colors[r], xml_escaped(b.label).c_str());
    svg += buf;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace spillway::plan
