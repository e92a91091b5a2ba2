// A picture of one step: a row per stream (compute, host→device,
// device→host), each op or copy a bar from its start to its end. The
// planner draws its prediction with it, the GPU engine a measured step.
#pragma once

#include <string>
#include <vector>

namespace spillway::plan {

struct TimelineBar {
  int row = 0;  // 0 compute, 1 host→device, 2 device→host
  double start = 0, end = 0;  // seconds from the start of the step
  std::string label;
  bool heavy = false;  // a matmul or attention node: drawn darker
};

std::string timeline_svg(const std::vector<TimelineBar>& bars, const std::string& title);

}  // namespace spillway::plan
