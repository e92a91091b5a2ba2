// Built only with the CUDA backend: the library globs every src/ops/*.cc.
#ifdef SPILLWAY_HAS_CUDA

#include "ops/attention_cudnn.h"

#include <cudnn.h>
// The frontend's headers define helpers this file never calls.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

#include <bit>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "device/cuda/cuda_check.h"

namespace spillway::ops {

namespace fe = cudnn_frontend;

namespace {

// Tensor ids in the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kOut, kLse, kDout, kDq, kDk, kDv };

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) throw Error(call, cudnnGetErrorString(status));
}

// The frontend returns its errors; a failed step is named with its message.
std::optional<std::string> failure(fe::error_t status, const char* step) {
  if (status.is_good()) return std::nullopt;
  return std::string("cudnn_frontend ") + step + ": " + status.get_message();
}

void check_shape(const AttentionShape& s) {
  SPW_CHECK(s.batch >= 0 && s.seq >= 0, "cuDNN attention", "negative size: batch ", s.batch,
            ", seq ", s.seq);
  SPW_CHECK(s.q_heads > 0 && s.kv_heads > 0 && s.head_dim > 0, "cuDNN attention",
            "q_heads, kv_heads and head_dim must be positive, got ", s.q_heads, ", ", s.kv_heads,
            ", ", s.head_dim);
  SPW_CHECK(s.q_heads % s.kv_heads == 0, "cuDNN attention", "q_heads ", s.q_heads,
            " is not a multiple of kv_heads ", s.kv_heads);
  SPW_CHECK(!s.offset() || (!s.packed_qkv && s.q_start >= 0 && s.q_start + s.seq <= s.keys()), "cuDNN attention",
            "queries from offset ", s.q_start, " (", s.seq, " of them) over ", s.keys(),
            " keys: they must lie among the keys, and q, k, v apart");
}

bool empty(const AttentionShape& s) { return s.batch == 0 || s.seq == 0; }

// The keys cuDNN is shown: from a query offset (context parallelism), only
// those some query sees, [0, q_start + seq). Shown all of them, its
// backward pass with the causal band moved right visits the key tiles no
// query sees, and the context ranks' work no longer balances
// (docs/parallel.md, context parallelism). The keys' rows stay s.keys()
// apart in memory.
int64_t shown_keys(const AttentionShape& s) { return s.offset() ? s.q_start + s.seq : s.keys(); }

// cuDNN sees [batch, heads, seq, head_dim] with the strides of our
// [batch, seq, heads * head_dim] layout, whose rows are `row` elements apart
// (wider than heads * head_dim when q, k and v are packed in one tensor).
// Keys and values (and their gradients) have s.keys() rows: more than the
// queries' from a query offset (context parallelism), of which cuDNN sees
// shown_keys(s).
fe::graph::Tensor_attributes& lay_out_activation(fe::graph::Tensor_attributes& t, const char* name,
                                                 Uid uid, const AttentionShape& s, int64_t heads) {
  const bool packed = s.packed_qkv && uid != kOut && uid != kDout;
  const int64_t row = packed ? s.packed_width() : heads * s.head_dim;
  const bool keys = uid == kK || uid == kV || uid == kDk || uid == kDv;
  return t.set_name(name)
      .set_uid(uid)
      .set_dim({s.batch, heads, keys ? shown_keys(s) : s.seq, s.head_dim})
      .set_stride({(keys ? s.keys() : s.seq) * row, s.head_dim, row, 1});
}

// The gradient rows of the keys cuDNN was not shown (shown_keys): no query
// sees them, so they are zero.
void zero_unseen_key_rows(bf16* d, const AttentionShape& s, cudaStream_t stream) {
  const int64_t unseen = s.keys() - shown_keys(s);
  if (unseen == 0) return;
  const size_t row = static_cast<size_t>(s.kv_width()) * sizeof(bf16);
  SPW_CUDA(cudaMemset2DAsync(d + shown_keys(s) * s.kv_width(), static_cast<size_t>(s.keys()) * row, 0,
                             static_cast<size_t>(unseen) * row, static_cast<size_t>(s.batch), stream));
}

// The softmax stats, packed [batch, q_heads, seq, 1]: our lse layout.
fe::graph::Tensor_attributes& lay_out_stats(fe::graph::Tensor_attributes& t,
                                            const AttentionShape& s) {
  return t.set_name("lse")
      .set_uid(kLse)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.batch, s.q_heads, s.seq, 1})
      .set_stride({s.q_heads * s.seq, s.seq, 1, 1});
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name,
                                                    Uid uid, const AttentionShape& s,
                                                    int64_t heads) {
  fe::graph::Tensor_attributes t;
  return graph.tensor(lay_out_activation(t, name, uid, s, heads));
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const char* name, Uid uid,
            const AttentionShape& s, int64_t heads) {
  lay_out_activation(*t, name, uid, s, heads).set_output(true);
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The causal mask from the top-left corner, moved right by the query
// offset: query t sees keys u <= q_start + t.
std::shared_ptr<fe::graph::Graph> forward_graph(const AttentionShape& s, float scale) {
  auto graph = new_graph();
  auto q = input(*graph, "q", kQ, s, s.q_heads);
  auto k = input(*graph, "k", kK, s, s.kv_heads);
  auto v = input(*graph, "v", kV, s, s.kv_heads);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_generate_stats(true)
                     .set_attn_scale(scale)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(s.q_start);
  auto [out, stats] = graph->sdpa(q, k, v, options);
  output(out, "out", kOut, s, s.q_heads);
  lay_out_stats(*stats, s).set_output(true);
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const AttentionShape& s, float scale,
                                                 CudnnBackwardOrder order) {
  auto graph = new_graph();
  auto q = input(*graph, "q", kQ, s, s.q_heads);
  auto k = input(*graph, "k", kK, s, s.kv_heads);
  auto v = input(*graph, "v", kV, s, s.kv_heads);
  auto out = input(*graph, "out", kOut, s, s.q_heads);
  auto dout = input(*graph, "dout", kDout, s, s.q_heads);
  fe::graph::Tensor_attributes lse_attributes;
  auto lse = graph->tensor(lay_out_stats(lse_attributes, s));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_attn_scale(scale)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(s.q_start)
                     .set_deterministic_algorithm(order == CudnnBackwardOrder::kDeterministic);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, out, dout, lse, options);
  output(dq, "dq", kDq, s, s.q_heads);
  output(dk, "dk", kDk, s, s.kv_heads);
  output(dv, "dv", kDv, s, s.kv_heads);
  return graph;
}

std::shared_ptr<fe::graph::Graph> pass_graph(const AttentionShape& s, float scale, AttentionPass pass,
                                             CudnnBackwardOrder order) {
  return pass == AttentionPass::kForward ? forward_graph(s, scale) : backward_graph(s, scale, order);
}

// The steps up to the heuristic's list of plans, checked: the first failure,
// or nothing. Each step runs only if the ones before it passed.
std::optional<std::string> list_plans(fe::graph::Graph& graph, cudnnHandle_t handle) {
  std::optional<std::string> refusal = failure(graph.validate(), "validate");
  if (!refusal) refusal = failure(graph.build_operation_graph(handle), "build_operation_graph");
  if (!refusal) {
    refusal = failure(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                      "create_execution_plans");
  }
  if (!refusal) refusal = failure(graph.check_support(), "check_support");
  return refusal;
}

void* device(const void* p) { return const_cast<void*>(p); }

// The PlanKey index of the entry that describes the whole list of plans.
constexpr int kWholeList = -2;

}  // namespace

// A built graph and the plan of it to run, or why cuDNN refused it.
struct CudnnAttention::Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
  std::optional<std::string> refusal;
  // kHeuristicPlan: the graph's own choice (build_plans() built only that
  // one). Otherwise the graph has every plan of the list built that could
  // be, and this is the one to run.
  int index = kHeuristicPlan;
  // In the kWholeList entry: the list's length and its first plan that built.
  int count = 0;
  int first_built = -1;
  std::string name;  // cuDNN's name of plan `index`
};

CudnnAttention::CudnnAttention(CudnnBackwardOrder backward_order)
    : backward_order_(backward_order) {
  check_cudnn(cudnnCreate(&handle_), "cudnnCreate");
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // the plans hold resources of the handle
  if (handle_ != nullptr) cudnnDestroy(handle_);
}

CudnnAttention::PlanKey CudnnAttention::key(const AttentionShape& shape, float scale,
                                            AttentionPass pass, int index) {
  return PlanKey{shape.batch,    shape.seq,     shape.q_heads, shape.kv_heads, shape.head_dim, shape.keys(),
                 shape.q_start,  std::bit_cast<uint32_t>(scale), pass,           shape.packed_qkv, index};
}

CudnnAttention::Plan& CudnnAttention::plan(const AttentionShape& shape, double scale,
                                           AttentionPass pass) {
  return plan(shape, scale, pass, pinned_plan_);
}

CudnnAttention::Plan& CudnnAttention::plan(const AttentionShape& shape, double scale,
                                           AttentionPass pass, int index) {
  check_shape(shape);
  const float scale_f = static_cast<float>(scale);
  auto found = plans_.find(key(shape, scale_f, pass, index));
  if (found != plans_.end()) return *found->second;

  if (index != kHeuristicPlan) {
    // The list as a whole, or a plan of it: build them all, once.
    const Plan& list = [&]() -> const Plan& {
      auto whole = plans_.find(key(shape, scale_f, pass, kWholeList));
      if (whole != plans_.end()) return *whole->second;
      build_every_plan(shape, scale_f, pass);
      return *plans_.at(key(shape, scale_f, pass, kWholeList));
    }();
    found = plans_.find(key(shape, scale_f, pass, index));
    if (found != plans_.end()) return *found->second;
    // An index outside the list (empty shapes have no plans and need none).
    auto outside = std::make_unique<Plan>();
    outside->index = index;
    if (list.refusal) {
      outside->refusal = list.refusal;
    } else if (!empty(shape)) {
      outside->refusal = "plan " + std::to_string(index) + " is outside cuDNN's list of " +
                         std::to_string(list.count) + " plans";
    }
    return *plans_.emplace(key(shape, scale_f, pass, index), std::move(outside)).first->second;
  }

  auto built = std::make_unique<Plan>();
  if (!empty(shape)) {
    auto graph = pass_graph(shape, scale_f, pass, backward_order_);
    // Each step runs only if the ones before it passed; the first failure is kept.
    std::optional<std::string> refusal = list_plans(*graph, handle_);
    if (!refusal) refusal = failure(graph->build_plans(), "build_plans");
    if (!refusal) refusal = failure(graph->get_workspace_size(built->workspace_bytes), "get_workspace_size");
    if (refusal) {
      built->refusal = std::move(refusal);
    } else {
      built->graph = std::move(graph);
    }
  }
  return *plans_.emplace(key(shape, scale_f, pass, kHeuristicPlan), std::move(built)).first->second;
}

// What build_plans(BuildPlanPolicy_t::ALL) does, one plan at a time so that
// each keeps its own reason for failing to build. The default path builds
// the same graph through the same steps and takes the first plan that
// builds, so that plan here runs the same kernel.
void CudnnAttention::build_every_plan(const AttentionShape& shape, float scale, AttentionPass pass) {
  auto list = std::make_unique<Plan>();
  list->index = kWholeList;
  if (!empty(shape)) {
    auto graph = pass_graph(shape, scale, pass, backward_order_);
    list->refusal = list_plans(*graph, handle_);
    if (!list->refusal) {
      list->graph = graph;
      list->count = static_cast<int>(graph->get_execution_plan_count());
    }
    for (int i = 0; i < list->count; ++i) {
      auto one = std::make_unique<Plan>();
      one->index = i;
      std::optional<std::string> refusal =
          failure(graph->get_plan_name_at_index(i, one->name), "get_plan_name_at_index");
      if (!refusal) refusal = failure(graph->build_plan_at_index(i), "build_plan_at_index");
      if (!refusal) {
        refusal = failure(graph->get_workspace_size_plan_at_index(i, one->workspace_bytes),
                          "get_workspace_size_plan_at_index");
      }
      if (refusal) {
        one->refusal = "plan " + std::to_string(i) + " (" + one->name + "): " + *refusal;
      } else {
        one->graph = graph;
        if (list->first_built < 0) list->first_built = i;
      }
      plans_.emplace(key(shape, scale, pass, i), std::move(one));
    }
  }
  plans_.emplace(key(shape, scale, pass, kWholeList), std::move(list));
}

int CudnnAttention::plan_count(const AttentionShape& shape, double scale, AttentionPass pass) {
  return plan(shape, scale, pass, kWholeList).count;
}

int CudnnAttention::heuristic_plan(const AttentionShape& shape, double scale, AttentionPass pass) {
  const Plan& list = plan(shape, scale, pass, kWholeList);
  if (list.refusal) throw Error("cuDNN attention", *list.refusal);
  SPW_CHECK(list.first_built >= 0, "cuDNN attention", "none of cuDNN's ", list.count,
            " plans built", empty(shape) ? " (an empty shape has none)" : "");
  return list.first_built;
}

std::string CudnnAttention::plan_name(const AttentionShape& shape, double scale, AttentionPass pass,
                                      int index) {
  if (index == kHeuristicPlan) {
    const Plan& p = plan(shape, scale, pass, kHeuristicPlan);
    if (p.refusal) throw Error("cuDNN attention", *p.refusal);
    SPW_CHECK(p.graph != nullptr, "cuDNN attention", "an empty shape has no plan");
    std::string name;
    if (auto refusal = failure(p.graph->get_plan_name(name), "get_plan_name")) {
      throw Error("cuDNN attention", *refusal);
    }
    return name;
  }
  const int count = plan_count(shape, scale, pass);
  SPW_CHECK(index >= 0 && index < count, "cuDNN attention", "plan ", index,
            " is outside cuDNN's list of ", count, " plans");
  return plan(shape, scale, pass, index).name;
}

void CudnnAttention::pin_plan(int index) {
  SPW_CHECK(index >= kHeuristicPlan, "cuDNN attention",
            "a plan index is at least 0, or kHeuristicPlan (-1); got ", index);
  pinned_plan_ = index;
}

bool CudnnAttention::supports(const AttentionShape& shape, double scale, AttentionPass pass) {
  return !plan(shape, scale, pass).refusal.has_value();
}

uint64_t CudnnAttention::workspace_bytes(const AttentionShape& shape, double scale,
                                         AttentionPass pass) {
  const Plan& p = plan(shape, scale, pass);
  if (p.refusal) throw Error("cuDNN attention", *p.refusal);
  return static_cast<uint64_t>(p.workspace_bytes);
}

void CudnnAttention::bind_stream(cudaStream_t stream) {
  check_cudnn(cudnnSetStream(handle_, stream), "cudnnSetStream");
}

void CudnnAttention::forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                             const AttentionShape& shape, double scale, void* workspace,
                             cudaStream_t stream) {
  const Plan& p = plan(shape, scale, AttentionPass::kForward);
  if (p.refusal) throw Error("cuDNN attention forward", *p.refusal);
  if (!p.graph) return;  // empty shape
  bind_stream(stream);
  std::unordered_map<int64_t, void*> pack{{kQ, device(q)},     {kK, device(k)},
                                          {kV, device(v)},     {kOut, out},
                                          {kLse, lse}};
  if (p.index == kHeuristicPlan) {
    if (auto refusal = failure(p.graph->execute(handle_, pack, workspace), "execute (forward)")) {
      throw Error("cuDNN attention forward", *refusal);
    }
  } else if (auto refusal = failure(p.graph->execute_plan_at_index(handle_, pack, workspace, p.index),
                                    "execute_plan_at_index (forward)")) {
    throw Error("cuDNN attention forward", *refusal);
  }
}

void CudnnAttention::backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                              const AttentionShape& shape, double scale, void* workspace,
                              cudaStream_t stream) {
  const Plan& p = plan(shape, scale, AttentionPass::kBackward);
  if (p.refusal) throw Error("cuDNN attention backward", *p.refusal);
  if (!p.graph) return;
  bind_stream(stream);
  std::unordered_map<int64_t, void*> pack{
      {kQ, device(q)},       {kK, device(k)}, {kV, device(v)},   {kOut, device(out)},
      {kDout, device(dout)}, {kLse, device(lse)}, {kDq, dq}, {kDk, dk}, {kDv, dv}};
  zero_unseen_key_rows(dk, shape, stream);
  zero_unseen_key_rows(dv, shape, stream);
  if (p.index == kHeuristicPlan) {
    if (auto refusal = failure(p.graph->execute(handle_, pack, workspace), "execute (backward)")) {
      throw Error("cuDNN attention backward", *refusal);
    }
  } else if (auto refusal = failure(p.graph->execute_plan_at_index(handle_, pack, workspace, p.index),
                                    "execute_plan_at_index (backward)")) {
    throw Error("cuDNN attention backward", *refusal);
  }
}

}  // namespace spillway::ops

#endif  // SPILLWAY_HAS_CUDA
