#include "ops/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/add.h"
#include "testing/numeric.h"
#include "testing/threads.h"

namespace spillway::ops {
namespace {

using spillway::testing::bytes_of;
using spillway::testing::cast_vector;
using spillway::testing::dot;
using spillway::testing::numeric_gradient;
using spillway::testing::random_vector;
using spillway::testing::rel_error;

// Each value rounded to float, so the float kernel and the double reference
// read the same inputs.
std::vector<double> as_float_values(const std::vector<double>& v) {
  auto rounded = cast_vector<float>(v);
  return {rounded.begin(), rounded.end()};
}

std::vector<int32_t> random_ids(int64_t tokens, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& id : ids) id = dist(rng);
  return ids;
}

std::vector<double> reference_forward(const std::vector<int32_t>& ids,
                                      const std::vector<double>& table, int64_t dim) {
  std::vector<double> out;
  for (int32_t id : ids) {
    for (int64_t j = 0; j < dim; ++j) out.push_back(table[id * dim + j]);
  }
  return out;
}

std::vector<double> reference_backward(const std::vector<int32_t>& ids,
                                       const std::vector<double>& dout, int64_t vocab,
                                       int64_t dim) {
  std::vector<double> dtable(static_cast<size_t>(vocab * dim), 0.0);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t j = 0; j < dim; ++j) dtable[ids[t] * dim + j] += dout[t * dim + j];
  }
  return dtable;
}

struct Dims {
  int64_t tokens, vocab, dim;
};

const Dims kShapes[] = {{1, 1, 1}, {7, 5, 5}, {33, 64, 64}, {33, 5, 129}, {7, 64, 1}, {200, 3, 33}};

TEST(Embedding, FloatMatchesReference) {
  uint64_t seed = 1;
  for (const Dims& d : kShapes) {
    auto ids = random_ids(d.tokens, d.vocab, seed++);
    auto table = as_float_values(random_vector(d.vocab * d.dim, seed++));
    auto dout = as_float_values(random_vector(d.tokens * d.dim, seed++));
    auto table_f = cast_vector<float>(table), dout_f = cast_vector<float>(dout);

    std::vector<float> out(static_cast<size_t>(d.tokens * d.dim));
    embedding_forward<float>(ids.data(), table_f.data(), out.data(), d.tokens, d.vocab, d.dim);
    EXPECT_LE(rel_error(out, reference_forward(ids, table, d.dim)), 1e-5)
        << "tokens=" << d.tokens << " vocab=" << d.vocab << " dim=" << d.dim;

    // dtable starts as NaN: backward must overwrite every row, used or not.
    std::vector<float> dtable(static_cast<size_t>(d.vocab * d.dim),
                              std::numeric_limits<float>::quiet_NaN());
    embedding_backward<float>(ids.data(), dout_f.data(), dtable.data(), d.tokens, d.vocab, d.dim);
    EXPECT_LE(rel_error(dtable, reference_backward(ids, dout, d.vocab, d.dim)), 1e-5)
        << "tokens=" << d.tokens << " vocab=" << d.vocab << " dim=" << d.dim;
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  // vocab larger than tokens, so some rows are unused and must get zero.
  const Dims shapes[] = {{5, 8, 3}, {9, 4, 7}};
  uint64_t seed = 50;
  for (const Dims& d : shapes) {
    auto ids = random_ids(d.tokens, d.vocab, seed++);
    auto table = random_vector(d.vocab * d.dim, seed++);
    auto upstream = random_vector(d.tokens * d.dim, seed++);
    std::vector<double> out(static_cast<size_t>(d.tokens * d.dim));
    auto loss = [&] {
      embedding_forward<double>(ids.data(), table.data(), out.data(), d.tokens, d.vocab, d.dim);
      return dot(out, upstream);
    };
    auto want = numeric_gradient(table, loss);
    std::vector<double> dtable(table.size(), std::numeric_limits<double>::quiet_NaN());
    embedding_backward<double>(ids.data(), upstream.data(), dtable.data(), d.tokens, d.vocab,
                               d.dim);
    EXPECT_LE(rel_error(dtable, want), 1e-6) << "tokens=" << d.tokens << " vocab=" << d.vocab;
  }
}

// Accumulating adds each used row's rounded sum to what the table held, so
// the result is old + result exactly, and rows no token uses keep their
// values (the backward of a second micro-batch into the same buffer).
TEST(Embedding, BackwardAccumulatesIntoTheTable) {
  uint64_t seed = 80;
  for (const Dims& d : kShapes) {
    auto ids = random_ids(d.tokens, d.vocab, seed++);
    auto dout = cast_vector<float>(random_vector(d.tokens * d.dim, seed++));
    std::vector<float> fresh(static_cast<size_t>(d.vocab * d.dim), std::numeric_limits<float>::quiet_NaN());
    embedding_backward<float>(ids.data(), dout.data(), fresh.data(), d.tokens, d.vocab, d.dim);

    const auto old = cast_vector<float>(random_vector(d.vocab * d.dim, seed++, -4.0, 4.0));
    auto acc = old;
    embedding_backward<float>(ids.data(), dout.data(), acc.data(), d.tokens, d.vocab, d.dim,
                              /*accumulate=*/true);
    for (size_t i = 0; i < acc.size(); ++i) {
      ASSERT_EQ(acc[i], old[i] + fresh[i]) << "tokens=" << d.tokens << " vocab=" << d.vocab << " i=" << i;
    }
  }
}

// Random values with a -0 every 5th element: a base of -0 in a row no token
// uses is where base + 0 (what the unfused add computes) and a plain copy of
// base differ in their bits.
template <typename T>
std::vector<T> with_negative_zeros(std::vector<double> v) {
  for (size_t i = 0; i < v.size(); i += 5) v[i] = -0.0;
  return cast_vector<T>(v);
}

// A backward with a base is, bit for bit, the backward without one followed
// by ops::add(base, dtable) (out = base + dtable, or out += base + dtable):
// the graph it replaces (graph/fuse_embedding_add.h). Every row is written
// (the output starts as NaN), used or not.
template <typename T>
void expect_base_is_backward_then_add() {
  uint64_t seed = 300;
  for (const Dims& d : kShapes) {
    const int64_t n = d.vocab * d.dim;
    auto ids = random_ids(d.tokens, d.vocab, seed++);
    const auto dout = cast_vector<T>(random_vector(d.tokens * d.dim, seed++));
    const auto base = with_negative_zeros<T>(random_vector(n, seed++, -3.0, 3.0));
    const auto old = with_negative_zeros<T>(random_vector(n, seed++, -2.0, 2.0));
    const std::string what = "tokens=" + std::to_string(d.tokens) + " vocab=" + std::to_string(d.vocab) +
                             " dim=" + std::to_string(d.dim);

    std::vector<T> scattered(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
    embedding_backward<T>(ids.data(), dout.data(), scattered.data(), d.tokens, d.vocab, d.dim);
    std::vector<T> want(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
    add<T>(base.data(), scattered.data(), want.data(), n);
    std::vector<T> got(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
    embedding_backward<T>(ids.data(), dout.data(), got.data(), d.tokens, d.vocab, d.dim, false, base.data());
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << what;

    auto want_acc = old;
    add<T>(base.data(), scattered.data(), want_acc.data(), n, /*accumulate=*/true);
    auto got_acc = old;
    embedding_backward<T>(ids.data(), dout.data(), got_acc.data(), d.tokens, d.vocab, d.dim, true, base.data());
    EXPECT_EQ(bytes_of(got_acc), bytes_of(want_acc)) << "accumulating, " << what;
  }
}

TEST(Embedding, BackwardWithBaseIsBackwardThenAdd) {
  expect_base_is_backward_then_add<float>();
  expect_base_is_backward_then_add<double>();
}

// Against float64: base + the sum of each row's dout rows.
TEST(Embedding, BackwardWithBaseMatchesReference) {
  uint64_t seed = 400;
  for (const Dims& d : kShapes) {
    auto ids = random_ids(d.tokens, d.vocab, seed++);
    auto dout = as_float_values(random_vector(d.tokens * d.dim, seed++));
    auto base = as_float_values(random_vector(d.vocab * d.dim, seed++));
    auto want = reference_backward(ids, dout, d.vocab, d.dim);
    for (size_t i = 0; i < want.size(); ++i) want[i] += base[i];
    const auto dout_f = cast_vector<float>(dout), base_f = cast_vector<float>(base);
    std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
    embedding_backward<float>(ids.data(), dout_f.data(), got.data(), d.tokens, d.vocab, d.dim, false, base_f.data());
    EXPECT_LE(rel_error(got, want), 1e-6) << "tokens=" << d.tokens << " vocab=" << d.vocab << " dim=" << d.dim;
  }
}

void expect_bad_id(const std::vector<int32_t>& ids, const std::string& id_text,
                   const std::string& position_text) {
  const int64_t vocab = 10, dim = 2;
  std::vector<float> table(vocab * dim, 1.0f), rows(ids.size() * dim, 1.0f);
  for (int pass = 0; pass < 2; ++pass) {
    try {
      if (pass == 0) {
        embedding_forward<float>(ids.data(), table.data(), rows.data(), ids.size(), vocab, dim);
      } else {
        embedding_backward<float>(ids.data(), rows.data(), table.data(), ids.size(), vocab, dim);
      }
      ADD_FAILURE() << "no error for " << id_text;
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_EQ(e.thing(), "embedding");
      EXPECT_NE(message.find(id_text), std::string::npos) << message;
      EXPECT_NE(message.find(position_text), std::string::npos) << message;
    }
  }
}

TEST(Embedding, RejectsIdsOutsideVocabulary) {
  expect_bad_id({1, 2, 3, 10, 4}, "id 10", "position 3");
  expect_bad_id({-1, 2}, "id -1", "position 0");
}

// Few rows and many tokens: each row sums hundreds of gradients. The float
// kernel sums in double, where another order seldom shows after rounding to
// float; the double kernel shows any change of order in its low bits.
template <typename T>
void expect_backward_independent_of_threads() {
  const int64_t tokens = 4000, vocab = 600, dim = 129;
  auto ids = random_ids(tokens, vocab, 7);
  for (int64_t t = 0; t < tokens; t += 3) ids[t] = 0;  // one very frequent id
  auto dout = cast_vector<T>(random_vector(tokens * dim, 8));
  testing::expect_same_bits_with_1_and_4_threads([&] {
    std::vector<T> dtable(static_cast<size_t>(vocab * dim));
    embedding_backward<T>(ids.data(), dout.data(), dtable.data(), tokens, vocab, dim);
    return dtable;
  });
}

TEST(Embedding, BackwardDoesNotDependOnThreadCount) {
  expect_backward_independent_of_threads<float>();
  expect_backward_independent_of_threads<double>();
}

}  // namespace
}  // namespace spillway::ops
