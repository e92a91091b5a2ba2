// Instruction examples packed into rows and the same one a row: what the
// GPU engines' packing tests step on. Six examples of 10 to 20 tokens (a
// prompt of 5 each, not counted), three a row of `seq` in two packed rows,
// positions restarting and attention kept inside each example.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "testing/llama.h"
#include "train/instruction_batches.h"
#include "train/instruction_packing.h"

namespace spillway::testing {

struct PackedExamples {
  static constexpr int64_t kExamples = 6, kRows = 2;
  int64_t seq = 0;
  // Two packed rows of seq tokens, as a training step takes them.
  std::vector<int32_t> inputs, targets, positions, doc_starts;
  // The six examples one a row.
  std::vector<int32_t> row_inputs, row_targets;
};

inline PackedExamples packed_examples(int64_t seq) {
  PackedExamples p;
  p.seq = seq;
  std::vector<train::InstructionExample> examples;
  for (int e = 0; e < PackedExamples::kExamples; ++e) {
    train::InstructionExample x;
    x.ids = random_tokens(static_cast<size_t>(10 + 2 * e), 40 + e, 1000);  // rows of 33 and 51 pairs
    for (size_t i = 0; i < x.ids.size(); ++i) x.trained.push_back(i >= 5 ? 1 : 0);  // a prompt of 5
    examples.push_back(std::move(x));
  }
  const auto n = static_cast<size_t>(PackedExamples::kRows * seq);
  p.inputs.resize(n);
  p.targets.resize(n);
  p.positions.resize(n);
  p.doc_starts.resize(n);
  const auto s = static_cast<size_t>(seq);
  for (size_t r = 0; r < PackedExamples::kRows; ++r) {
    const train::PackedRow row{std::span(p.inputs).subspan(r * s, s), std::span(p.targets).subspan(r * s, s),
                               std::span(p.positions).subspan(r * s, s), std::span(p.doc_starts).subspan(r * s, s)};
    int64_t at = 0;
    for (size_t e = 3 * r; e < 3 * r + 3; ++e) at = train::place_example(examples[e], at, row);
    EXPECT_LT(at, seq) << "row " << r << " must hold its examples whole";
    train::pad_packed_row(at, 0, row);
  }
  p.row_inputs.resize(PackedExamples::kExamples * s);
  p.row_targets.resize(p.row_inputs.size());
  for (size_t e = 0; e < PackedExamples::kExamples; ++e) {
    train::fill_instruction_row(examples[e], 0, std::span(p.row_inputs).subspan(e * s, s),
                                std::span(p.row_targets).subspan(e * s, s));
  }
  return p;
}

}  // namespace spillway::testing
