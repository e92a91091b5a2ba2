// The loss curve of a run as a self-contained SVG picture.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace spillway::train {

struct LossCurves {
  std::vector<std::pair<double, double>> train;       // (step, loss)
  std::vector<std::pair<double, double>> validation;  // (step, loss)
  std::string title;
};

std::string loss_plot_svg(const LossCurves& curves);

}  // namespace spillway::train
