// Folds a rope into the matrix product that feeds it: the fused q|k|v
// projection's product goes through the rope of q and k (v carried), its
// only reader, so the matmul rotates its own output (Fused::rope). A GPU
// kernel can then rotate the product in its epilogue instead of reading the
// [tokens, (heads + 2 kv_heads) * head_dim] product back from memory; the CPU
// runner makes the product in the output and rotates it there, as the rope
// did in place.
//
// Only the forward: rope_backward's input is the attention's d(q|k|v), not
// a matrix product.
//
// Not part of fuse_step: recomputation (graph/recompute.h) remakes a dropped
// roped q|k|v cheaply from the kept product, which it could not do once the
// projection makes it. The resident GPU engine, which keeps every
// activation, applies it after the SwiGLU fusion:
// fuse_matmul_rope(fuse_matmul_swiglu(fuse_step(g)).graph).
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

struct RopeFused {
  Graph graph;
  int fused = 0;  // rope nodes folded into the product they rotate
};

// A new graph in which every rope that overwrites its one output, and whose
// input is the only output of a two-input matmul that overwrites it, read by
// nothing else and not a graph output, is folded into that matmul. The
// matmul stays where it was and writes the rope's output; every value keeps
// its id, and the product is left without a producer or readers.
RopeFused fuse_matmul_rope(const Graph& graph);

}  // namespace spillway::graph
