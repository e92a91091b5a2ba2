// The attention ops in the graph: causal GQA attention and its backward
// (ops/attention.h), over separate q, k and v or one packed q|k|v.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/builder.h"
#include "ops/attention.h"

namespace spillway::ops {

// q [batch, seq, q_heads * head_dim], k and v [batch, seq, kv_heads *
// head_dim]: out like q, and each row's log-sum-exp (".lse", [batch,
// q_heads, seq]) for the backward. With `doc_starts` (i32 [batch, seq], see
// ops/attention.h) each token attends within its own document only; without
// it the node is the plain causal one.
// `q_start` > 0: the queries are positions [q_start, q_start + seq) and k,
// v hold keys from position 0 (context parallelism; ops/attention.h).
graph::Value attention(graph::Builder& b, graph::Value q, graph::Value k, graph::Value v, int64_t q_heads,
                       int64_t kv_heads, double scale, std::string_view name = "attention",
                       graph::Value doc_starts = {}, int64_t q_start = 0);
// Over one packed qkv [batch, seq, (q_heads + 2 kv_heads) * head_dim]: q, k
// and v are its column blocks, in that order.
graph::Value attention_packed(graph::Builder& b, graph::Value qkv, int64_t q_heads, int64_t kv_heads, double scale,
                              std::string_view name = "attention", graph::Value doc_starts = {});
// {dq, dk, dv}.
std::vector<graph::Value> attention_backward(graph::Builder& b, graph::Value dout, graph::Value q, graph::Value k,
                                             graph::Value v, graph::Value out, graph::Value lse,
                                             const graph::NodeAttrs& forward_attrs, std::string_view name,
                                             graph::Value doc_starts = {});
// dqkv, in qkv's layout.
graph::Value attention_packed_backward(graph::Builder& b, graph::Value dout, graph::Value qkv, graph::Value out,
                                       graph::Value lse, const graph::NodeAttrs& forward_attrs, std::string_view name,
                                       graph::Value doc_starts = {});

// The shape an attention or attention_backward node works on, packed_qkv
// set when its q, k and v come packed.
AttentionShape attention_shape(const graph::Graph& g, const graph::Node& n);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
namespace spillway::ops {

struct CudaOpContext;
// How many attention nodes run through cuDNN (the rest use the own kernel),
// and that as "attention through cuDNN in 64 of 64 nodes".
int cudnn_attention_nodes(const CudaOpContext& cuda);
std::string attention_summary(const CudaOpContext& cuda);

}  // namespace spillway::ops
#endif
