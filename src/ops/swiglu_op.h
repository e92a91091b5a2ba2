// The swiglu ops in the graph: LLaMA's MLP gate and its backward
// (ops/swiglu.h), over separate gate and up or one packed gate|up.
#pragma once

#include <string_view>
#include <vector>

#include "graph/builder.h"

namespace spillway::ops {

graph::Value swiglu(graph::Builder& b, graph::Value gate, graph::Value up, std::string_view name = "swiglu");
// Over one packed gate_up [..., 2 * ffn], each row's gate then its up.
graph::Value swiglu_packed(graph::Builder& b, graph::Value gate_up, std::string_view name = "swiglu");
// {dgate, dup}.
std::vector<graph::Value> swiglu_backward(graph::Builder& b, graph::Value dout, graph::Value gate, graph::Value up,
                                          std::string_view name);
// dgate_up, in gate_up's layout.
graph::Value swiglu_packed_backward(graph::Builder& b, graph::Value dout, graph::Value gate_up, std::string_view name);

}  // namespace spillway::ops
