// Attention over packed rows (ops/attention.h's doc_starts): a row holding
// several documents gives each document exactly the attention it would get
// alone, forward and backward; its gradient matches finite differences; one
// document a row is the plain causal kernel bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/attention.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using testing::cast_vector;
using testing::random_vector;
using testing::rel_error;

int64_t q_numel(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.head_dim; }
int64_t kv_numel(const AttentionShape& s) { return s.batch * s.seq * s.kv_heads * s.head_dim; }
int64_t lse_numel(const AttentionShape& s) { return s.batch * s.q_heads * s.seq; }

// doc_starts [rows, seq] for documents of the given lengths, row after row;
// each row's lengths must sum to seq.
std::vector<int32_t> starts_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int32_t> starts;
  for (const auto& lengths : rows) {
    int64_t at = 0;
    for (int64_t len : lengths) {
      for (int64_t i = 0; i < len; ++i) starts.push_back(static_cast<int32_t>(at));
      at += len;
    }
  }
  return starts;
}

template <typename T>
struct AttentionRun {
  std::vector<T> q, k, v, dout;  // inputs
  std::vector<T> out, lse, dq, dk, dv;
};

// Forward and backward of `r`'s inputs over `s`, with documents or without.
template <typename T>
void run(AttentionRun<T>& r, const AttentionShape& s, double scale, const int32_t* docs) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  r.out.assign(static_cast<size_t>(q_numel(s)), nan);
  r.lse.assign(static_cast<size_t>(lse_numel(s)), nan);
  attention_forward(r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(), s, scale, docs);
  r.dq.assign(static_cast<size_t>(q_numel(s)), nan);
  r.dk.assign(static_cast<size_t>(kv_numel(s)), nan);
  r.dv.assign(static_cast<size_t>(kv_numel(s)), nan);
  attention_backward(r.dout.data(), r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(), r.dq.data(),
                     r.dk.data(), r.dv.data(), s, scale, docs);
}

template <typename T>
AttentionRun<T> random_run(const AttentionShape& s, uint64_t seed) {
  return {random_vector<T>(q_numel(s), seed), random_vector<T>(kv_numel(s), seed + 1),
          random_vector<T>(kv_numel(s), seed + 2), random_vector<T>(q_numel(s), seed + 3), {}, {}, {}, {}, {}};
}

// Rows [at, at + len) of row b of a [batch, seq, width] tensor, as one
// [1, len, width] tensor, and back.
template <typename T>
std::vector<T> rows_of(const std::vector<T>& x, int64_t seq, int64_t width, int64_t b, int64_t at, int64_t len) {
  const auto first = x.begin() + (b * seq + at) * width;
  return std::vector<T>(first, first + len * width);
}

// Writes a [1, len, width] tensor over rows [at, at + len) of row b.
void put_rows(const std::vector<double>& part, std::vector<double>& x, int64_t seq, int64_t width, int64_t b,
              int64_t at) {
  std::copy(part.begin(), part.end(), x.begin() + (b * seq + at) * width);
}

// The packed run against the lone runs of its documents put side by side
// (compared over whole tensors: a one-token document's dq and dk are zero
// up to rounding, which no relative error of its own could bound).
template <typename T>
void expect_documents_alone(const AttentionShape& s, const std::vector<std::vector<int64_t>>& rows, double tolerance) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  const std::vector<int32_t> docs = starts_of(rows);
  AttentionRun<T> packed = random_run<T>(s, 7 + static_cast<uint64_t>(s.seq));
  run(packed, s, scale, docs.data());
  const int64_t qw = s.q_width(), kw = s.kv_width();
  std::vector<double> out(packed.out.size()), lse(packed.lse.size()), dq(packed.dq.size()), dk(packed.dk.size()),
      dv(packed.dv.size());
  const auto wide = [](const std::vector<T>& x) { return std::vector<double>(x.begin(), x.end()); };
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t at = 0;
    for (int64_t len : rows[static_cast<size_t>(b)]) {
      const AttentionShape one{1, len, s.q_heads, s.kv_heads, s.head_dim};
      AttentionRun<T> alone{rows_of(packed.q, s.seq, qw, b, at, len), rows_of(packed.k, s.seq, kw, b, at, len),
                            rows_of(packed.v, s.seq, kw, b, at, len), rows_of(packed.dout, s.seq, qw, b, at, len),
                            {}, {}, {}, {}, {}};
      run(alone, one, scale, nullptr);
      put_rows(wide(alone.out), out, s.seq, qw, b, at);
      put_rows(wide(alone.dq), dq, s.seq, qw, b, at);
      put_rows(wide(alone.dk), dk, s.seq, kw, b, at);
      put_rows(wide(alone.dv), dv, s.seq, kw, b, at);
      for (int64_t h = 0; h < s.q_heads; ++h) {
        for (int64_t i = 0; i < len; ++i) {
          lse[static_cast<size_t>((b * s.q_heads + h) * s.seq + at + i)] = alone.lse[static_cast<size_t>(h * len + i)];
        }
      }
      at += len;
    }
  }
  EXPECT_LE(rel_error(packed.out, out), tolerance) << "out";
  EXPECT_LE(rel_error(packed.lse, lse), tolerance) << "lse";
  EXPECT_LE(rel_error(packed.dq, dq), tolerance) << "dq";
  EXPECT_LE(rel_error(packed.dk, dk), tolerance) << "dk";
  EXPECT_LE(rel_error(packed.dv, dv), tolerance) << "dv";
}

// Documents that start inside a 64-key tile, end on its edge, span several
// tiles, and are a single token; rows with different layouts.
const std::vector<std::vector<int64_t>> kRows130 = {{5, 70, 1, 54}, {64, 64, 2}};

TEST(AttentionDocuments, EachDocumentAsIfAloneInDouble) {
  expect_documents_alone<double>({2, 130, 4, 2, 16}, kRows130, 1e-12);
  expect_documents_alone<double>({1, 9, 3, 1, 5}, {{3, 1, 5}}, 1e-12);
}

// In float the packed and the lone runs visit keys in different tiles, so
// they agree to rounding.
TEST(AttentionDocuments, EachDocumentAsIfAloneInFloat) {
  expect_documents_alone<float>({2, 130, 6, 2, 64}, kRows130, 1e-5);
}

TEST(AttentionDocuments, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 70, 2, 1, 3};
  const std::vector<int32_t> docs = starts_of({{4, 60, 6}, {1, 69}});
  const double scale = 0.7;
  AttentionRun<double> r = random_run<double>(s, 31);
  const auto loss = [&] {
    std::vector<double> out(static_cast<size_t>(q_numel(s))), lse(static_cast<size_t>(lse_numel(s)));
    attention_forward(r.q.data(), r.k.data(), r.v.data(), out.data(), lse.data(), s, scale, docs.data());
    return testing::dot(out, r.dout);
  };
  const std::vector<double> want_dq = testing::numeric_gradient(r.q, loss);
  const std::vector<double> want_dk = testing::numeric_gradient(r.k, loss);
  const std::vector<double> want_dv = testing::numeric_gradient(r.v, loss);
  run(r, s, scale, docs.data());
  EXPECT_LE(rel_error(r.dq, want_dq), 1e-6);
  EXPECT_LE(rel_error(r.dk, want_dk), 1e-6);
  EXPECT_LE(rel_error(r.dv, want_dv), 1e-6);
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(AttentionDocuments, OneDocumentPerRowIsThePlainKernelBitForBit) {
  const AttentionShape s{2, 130, 6, 2, 64};
  const double scale = 0.125;
  const std::vector<int32_t> docs = starts_of({{130}, {130}});
  AttentionRun<float> with = random_run<float>(s, 50), without = with;
  run(with, s, scale, docs.data());
  run(without, s, scale, nullptr);
  EXPECT_TRUE(same_bits(with.out, without.out));
  EXPECT_TRUE(same_bits(with.lse, without.lse));
  EXPECT_TRUE(same_bits(with.dq, without.dq));
  EXPECT_TRUE(same_bits(with.dk, without.dk));
  EXPECT_TRUE(same_bits(with.dv, without.dv));
}

TEST(AttentionDocuments, RejectsStartsThatAreNotContiguousDocuments) {
  const AttentionShape s{1, 4, 1, 1, 2};
  AttentionRun<float> r = random_run<float>(s, 1);
  std::vector<float> out(static_cast<size_t>(q_numel(s))), lse(static_cast<size_t>(lse_numel(s)));
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{0, 0, 1, 2}, std::vector<int32_t>{1, 1, 1, 1},
                                          std::vector<int32_t>{0, 0, 3, 2}, std::vector<int32_t>{0, 0, 0, -1}}) {
    try {
      attention_forward(r.q.data(), r.k.data(), r.v.data(), out.data(), lse.data(), s, 1.0, bad.data());
      ADD_FAILURE() << "accepted starts " << bad[0] << " " << bad[1] << " " << bad[2] << " " << bad[3];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("document start"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spillway::ops
