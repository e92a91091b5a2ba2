#include "graph/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "graph/op_def.h"

namespace spillway::graph {

std::string_view placement_name(Placement p) {
  switch (p) {
    case Placement::whole: return "whole";
    case Placement::partial: return "partial";
    case Placement::rows: return "split by rows";
    case Placement::columns: return "split by columns";
  }
  return "?";
}

int64_t Sharder::divided(int64_t count, std::string_view what) const {
  SPW_CHECK(count % tp.ranks == 0, "tensor parallelism", what, " (", count, ") does not split evenly over ",
            tp.ranks, " ranks");
  return count / tp.ranks;
}

Shape piece_shape(const Shape& whole, const ParameterSplit& split, int rank, int ranks) {
  (void)rank;  // every piece has the same shape, padded
  auto piece = [&](int64_t extent) { return (extent + ranks - 1) / ranks; };
  auto pieces = [&](int64_t extent) {
    if (split.parts.empty()) return piece(extent);
    int64_t sum = 0, total = 0;
    for (int64_t part : split.parts) {
      sum += piece(part);
      total += part;
    }
    SPW_CHECK(total == extent, "tensor parallelism", "parts adding to ", total, " split a dimension of ", extent);
    return sum;
  };
  switch (split.placement) {
    case Placement::rows: return Shape{pieces(whole.numel() / whole.last()), whole.last()};
    case Placement::columns: return whole.with_last(pieces(whole.last()));
    default: return whole;
  }
}

namespace {

// Calls copy(whole row or column, piece row or column, count) for each line
// (a row, or a column) of `rank`'s piece that holds part of the whole.
template <typename Copy>
void for_each_line(const Shape& shape, const ParameterSplit& split, int rank, int ranks, Copy copy) {
  const int64_t extent = split.placement == Placement::rows ? shape.numel() / shape.last() : shape.last();
  const std::vector<int64_t> parts = split.parts.empty() ? std::vector<int64_t>{extent} : split.parts;
  int64_t from = 0, to = 0;  // where the part starts in the whole and in the piece
  for (int64_t part : parts) {
    const int64_t p = (part + ranks - 1) / ranks;
    const int64_t first = std::min<int64_t>(p * rank, part);
    for (int64_t i = 0; i < std::min<int64_t>(p, part - first); ++i) copy(from + first + i, to + i);
    from += part;
    to += p;
  }
}

bool is_split(const ParameterSplit& s) { return s.placement == Placement::rows || s.placement == Placement::columns; }

}  // namespace

template <typename T>
std::vector<T> piece_of(std::span<const T> whole, const Shape& shape, const ParameterSplit& split, int rank,
                        int ranks) {
  SPW_CHECK(static_cast<int64_t>(whole.size()) == shape.numel(), "tensor parallelism", "a tensor of ", whole.size(),
            " elements for shape ", shape.str());
  if (!is_split(split)) return {whole.begin(), whole.end()};
  const int64_t rows = shape.numel() / shape.last(), columns = shape.last();
  const Shape mine = piece_shape(shape, split, rank, ranks);
  std::vector<T> out(static_cast<size_t>(mine.numel()), T(0));
  const int64_t piece_columns = mine.last();
  for_each_line(shape, split, rank, ranks, [&](int64_t w, int64_t p) {
    if (split.placement == Placement::rows) {
      std::copy_n(whole.data() + w * columns, columns, out.data() + p * columns);
    } else {
      for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r * piece_columns + p)] = whole[static_cast<size_t>(r * columns + w)];
    }
  });
  return out;
}

template <typename T>
std::vector<T> whole_of(std::span<const T> pieces, const Shape& shape, const ParameterSplit& split, int ranks) {
  if (!is_split(split)) return {pieces.begin(), pieces.begin() + shape.numel()};
  const Shape piece = piece_shape(shape, split, 0, ranks);
  SPW_CHECK(static_cast<int64_t>(pieces.size()) == piece.numel() * ranks, "tensor parallelism", pieces.size(),
            " elements for ", ranks, " pieces of ", piece.str());
  const int64_t rows = shape.numel() / shape.last(), columns = shape.last(), piece_columns = piece.last();
  std::vector<T> out(static_cast<size_t>(shape.numel()));
  for (int rank = 0; rank < ranks; ++rank) {
    const T* mine = pieces.data() + rank * piece.numel();
    for_each_line(shape, split, rank, ranks, [&](int64_t w, int64_t p) {
      if (split.placement == Placement::rows) {
        std::copy_n(mine + p * columns, columns, out.data() + w * columns);
      } else {
        for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r * columns + w)] = mine[r * piece_columns + p];
      }
    });
  }
  return out;
}

template std::vector<float> piece_of(std::span<const float>, const Shape&, const ParameterSplit&, int, int);
template std::vector<double> piece_of(std::span<const double>, const Shape&, const ParameterSplit&, int, int);
template std::vector<float> whole_of(std::span<const float>, const Shape&, const ParameterSplit&, int);
template std::vector<double> whole_of(std::span<const double>, const Shape&, const ParameterSplit&, int);

namespace {

class Pass final : public Sharder {
 public:
  Pass(RankGraph& out, Builder& b, const Graph& single, const TensorParallelism& tp)
      : Sharder(b, single, tp), out_(out) {
    out_.value.assign(single.values().size(), Value{});
    out_.placement.assign(single.values().size(), Placement::whole);
  }

  Placement placement(Value v) const override { return out_.placement.at(static_cast<size_t>(v.id)); }

  void set(Value single, Value local, Placement p) {
    out_.value[static_cast<size_t>(single.id)] = local;
    out_.placement[static_cast<size_t>(single.id)] = p;
  }

  Value as(Value v, Placement want) override {
    const Placement have = placement(v);
    const Value local = out_.of(v);
    SPW_CHECK(local.valid(), "tensor parallelism", "value '", g.value(v).name, "' is read before it is made");
    if (have == want) return local;
    const auto key = std::make_pair(v.id, want);
    if (auto it = moved_.find(key); it != moved_.end()) return it->second;
    const ValueInfo& info = g.value(v);
    const std::string name = info.name + "." + std::string(move_name(have, want));
    Value moved;
    const int64_t rows = info.shape.numel() / info.shape.last();
    if (have == Placement::partial && want == Placement::whole) {
      moved = collective(OpKind::all_reduce, local, info.shape, false, 0, name);
    } else if (have == Placement::partial && want == Placement::rows) {
      SPW_CHECK(rows % tp.ranks == 0, "sequence parallelism", "the ", rows, " tokens of a micro-batch do not split ",
                "evenly over ", tp.ranks, " ranks; choose a batch and sequence length whose product they divide, ",
                "or keep the residual stream whole (--no-sequence-parallel)");
      const Shape piece{rows / tp.ranks, info.shape.last()};
      moved = collective(OpKind::reduce_scatter, local, piece, false, rows, name);
    } else if ((have == Placement::rows || have == Placement::columns) && want == Placement::whole) {
      const bool columns = have == Placement::columns;
      moved = collective(OpKind::all_gather, local, info.shape, columns, columns ? info.shape.last() : rows, name);
    } else {
      throw Error("tensor parallelism", "value '" + info.name + "' is " + std::string(placement_name(have)) +
                                            " and no collective makes it " + std::string(placement_name(want)));
    }
    moved_[key] = moved;
    return moved;
  }

  void define(const Node& n, Placement p) override {
    const Node& made = b.graph().nodes().back();
    SPW_CHECK(made.outputs.size() == n.outputs.size(), node_label(n), "was emitted with ", made.outputs.size(),
              " outputs instead of ", n.outputs.size());
    for (size_t i = 0; i < n.outputs.size(); ++i) set(n.outputs[i], made.outputs[i], p);
  }

  void whole(const Node& n) override {
    std::vector<Value> inputs;
    for (Value in : n.inputs) inputs.push_back(as(in, Placement::whole));
    std::vector<OutputSpec> specs;
    std::vector<std::string> suffixes;
    for (Value o : n.outputs) {
      const ValueInfo& oi = g.value(o);
      suffixes.push_back(oi.name.size() > n.name.size() ? oi.name.substr(n.name.size() + 1) : "");
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const ValueInfo& oi = g.value(n.outputs[i]);
      specs.push_back({oi.shape, oi.dtype, suffixes[i]});
    }
    b.emit(n.kind, n.name, std::move(inputs), specs, n.attrs);
    define(n, Placement::whole);
  }

  void run(const std::function<ParameterSplit(const ValueInfo&)>& split) {
    const auto& values = g.values();
    for (size_t i = 0; i < values.size(); ++i) {
      const ValueInfo& v = values[i];
      const Value single{static_cast<int32_t>(i)};
      if (v.role == ValueRole::input) {
        set(single, b.input(v.name, v.shape, v.dtype), Placement::whole);
      } else if (v.role == ValueRole::parameter) {
        const ParameterSplit s = split(v);
        SPW_CHECK(s.placement != Placement::partial, "tensor parallelism", "parameter '", v.name,
                  "' declared as a partial sum");
        set(single, b.parameter(v.name, piece_shape(v.shape, s, tp.rank, tp.ranks)), s.placement);
      }
    }
    for (const Node& n : g.nodes()) {
      SPW_CHECK(!n.backward && n.attrs.fused == Fused::none && !n.recompute, node_label(n),
                "tensor parallelism splits a forward graph before autodiff and fusion");
      if (const auto rule = op_def(n.kind).shard) {
        rule(*this, n);
      } else {
        whole(n);
      }
    }
    // The graph's outputs are whole on every rank: their handles name the
    // whole values.
    for (Value o : g.outputs()) {
      const Value whole = as(o, Placement::whole);
      out_.graph.mark_output(whole);
      set(o, whole, Placement::whole);
    }
  }

 private:
  // The collective's node; its op's builder (ops/collective_op.h) is the
  // one autodiff's rules use, a layer above this pass.
  Value collective(OpKind kind, Value in, Shape out, bool split_columns, int64_t whole_extent,
                   const std::string& name) {
    NodeAttrs attrs;
    attrs.group = static_cast<int8_t>(tp.group);
    attrs.ranks = tp.ranks;
    attrs.split_columns = split_columns;
    attrs.whole_extent = whole_extent;
    return b.emit(kind, name, {in}, {{std::move(out), b.info(in).dtype, ""}}, attrs)[0];
  }

  static std::string_view move_name(Placement from, Placement to) {
    if (from == Placement::partial) return to == Placement::whole ? "all_reduce" : "reduce_scatter";
    return "all_gather";
  }

  RankGraph& out_;
  std::map<std::pair<int32_t, Placement>, Value> moved_;
};

}  // namespace

RankGraph shard_graph(const Graph& forward, DType dtype, const std::function<ParameterSplit(const ValueInfo&)>& split,
                      const TensorParallelism& tp) {
  SPW_CHECK(tp.ranks >= 1 && tp.rank >= 0 && tp.rank < tp.ranks, "tensor parallelism", "rank ", tp.rank, " of ",
            tp.ranks);
  RankGraph out;
  Builder b(out.graph, dtype);
  Pass pass(out, b, forward, tp);
  pass.run(split);
  return out;
}

}  // namespace spillway::graph
