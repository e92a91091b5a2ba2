// The batched, paged GPU decoder on tiny random LLaMAs whose weights are
// rounded to bf16 first, so that it and the CPU's batched decoder read the
// same weights and only the GPU's bf16 activations set them apart.
//
// Tolerance against the CPU (float32): the relative error over all logits of
// a step below 3e-2 and over each row below 5e-2, the bounds the batch-1
// CudaDecoder's test measured for bf16 activations on such models (0.8%
// overall and 1.4% in the worst row there). Everything else is bit for bit:
// a sequence's logits alone and in a batch of 8 mixed prompt and decode rows,
// its prompt whole and in chunks, in one pass and cut into passes.
#include "infer/cuda/cuda_batch_decoder.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "infer/llama_batch_decoder.h"
#include "testing/cuda_arrays.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::infer {
namespace {

constexpr double kLogitsTolerance = 3e-2;
constexpr double kRowTolerance = 5e-2;
constexpr int64_t kVocab = 300;

model::LlamaConfig config(bool tied) {
  // head_dim 64 with two query heads per kv head, an MLP of 1024 (the
  // tensor cores' down projection sums two slices); head_dim 128, four
  // query heads on one kv head (a prompt's rows past 64 attend in a group),
  // tied.
  auto c = tied ? testing::llama_config(kVocab, 512, 384, 2, 4, 1, true)
                : testing::llama_config(kVocab, 256, 1024, 2, 4, 2);
  c.max_position_embeddings = 1024;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.original_max_position_embeddings = 64;
  return c;
}

model::LlamaWeights bf16_weights(const model::LlamaConfig& c, uint64_t seed) {
  return testing::bf16_random_weights(c, seed, 0.05);
}

// A cache of `blocks` blocks of 16 tokens in bf16.
KvCacheOptions cache_of(const model::LlamaConfig& c, int64_t blocks) {
  return KvCacheOptions{kv_bytes_per_token(c, 2) * 16 * static_cast<uint64_t>(blocks), 16};
}

std::vector<float> row(const std::vector<float>& logits, size_t i) {
  return {logits.begin() + static_cast<std::ptrdiff_t>(i * kVocab),
          logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * kVocab)};
}

std::span<const int32_t> piece(const std::vector<int32_t>& v, size_t from, size_t n) {
  return std::span<const int32_t>(v).subspan(from, n);
}

// The three contracts above hold whichever kernels the matmuls run on (the
// CUDA cores' and the tensor cores', the default, their slices added apart
// or in the kernels that follow) and with decode steps replayed as CUDA
// graphs. Parameters: tensor cores, graphs, fused epilogues.
class CudaBatchDecoderKernels : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {
 protected:
  CudaBatchDecoderOptions options(int64_t max_rows = 512, int64_t logits_rows = 64) const {
    return {.ordinal = 0,
            .max_rows = max_rows,
            .logits_rows = logits_rows,
            .tensor_cores = std::get<0>(GetParam()),
            .cuda_graphs = std::get<1>(GetParam()),
            .fused_epilogues = std::get<2>(GetParam())};
  }
};

TEST_P(CudaBatchDecoderKernels, LogitsMatchTheCpuBatchDecoder) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "head_dim 128, tied" : "head_dim 64, untied");
    const auto c = config(tied);
    const auto weights = bf16_weights(c, tied ? 4 : 7);
    LlamaBatchDecoder cpu(weights, cache_of(c, 64));
    auto gpu = make_cuda_batch_decoder(weights, cache_of(c, 64), options());
    // Three sequences: prompts of 37, 200 (past 128 keys) and 5 tokens in
    // chunks that cross block boundaries, then decoding side by side.
    const std::vector<std::vector<int32_t>> streams = {testing::random_tokens(45, 1, kVocab),
                                                       testing::random_tokens(208, 2, kVocab),
                                                       testing::random_tokens(13, 3, kVocab)};
    const std::vector<std::vector<size_t>> cuts = {{20, 37, 38, 39, 40, 41, 42, 43, 44, 45},
                                                   {64, 128, 200, 201, 202, 203, 204, 205, 206, 207, 208},
                                                   {5, 6, 7, 8, 9, 10, 11, 12, 13}};
    std::vector<int64_t> cpu_seqs, gpu_seqs;
    for (size_t s = 0; s < streams.size(); ++s) {
      cpu_seqs.push_back(cpu.open());
      gpu_seqs.push_back(gpu->open());
    }
    std::vector<size_t> done(streams.size(), 0);
    for (size_t step = 0;; ++step) {
      std::vector<SequenceChunk> on_cpu, on_gpu;
      for (size_t s = 0; s < streams.size(); ++s) {
        if (step >= cuts[s].size()) continue;
        const auto tokens = piece(streams[s], done[s], cuts[s][step] - done[s]);
        on_cpu.push_back({cpu_seqs[s], tokens});
        on_gpu.push_back({gpu_seqs[s], tokens});
        done[s] = cuts[s][step];
      }
      if (on_cpu.empty()) break;
      const std::vector<float> want = cpu.step(on_cpu), got = gpu->step(on_gpu);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LT(testing::rel_error(got, testing::as_double(want)), kLogitsTolerance) << "step " << step;
      for (size_t i = 0; i < on_cpu.size(); ++i) {
        EXPECT_LT(testing::rel_error(row(got, i), testing::as_double(row(want, i))), kRowTolerance)
            << "step " << step << ", chunk " << i;
      }
    }
    for (size_t s = 0; s < streams.size(); ++s) EXPECT_EQ(gpu->position(gpu_seqs[s]), cpu.position(cpu_seqs[s]));
  }
}

// One sequence's prompt whole, then three tokens a step, alone; the logits of
// every step.
std::vector<std::vector<float>> alone(BatchDecoder& d, const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& next) {
  const int64_t s = d.open();
  std::vector<std::vector<float>> out{d.step(std::vector<SequenceChunk>{{s, prompt}})};
  for (const int32_t& t : next) out.push_back(d.step(std::vector<SequenceChunk>{{s, {&t, 1}}}));
  d.close(s);
  return out;
}

TEST_P(CudaBatchDecoderKernels, ASequencesBitsAreTheSameAloneAndInABatchOf8) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto c = config(false);
  const auto weights = bf16_weights(c, 11);
  const std::vector<int32_t> prompt = testing::random_tokens(40, 4, kVocab), next = {3, 170, 299};
  auto d = make_cuda_batch_decoder(weights, cache_of(c, 128), options());
  const auto want = alone(*d, prompt, next);

  // Seven others: four still reading prompts of different lengths, three
  // decoding after a prompt of their own; the sequence sits among them.
  const int64_t s = d->open();
  std::vector<int64_t> others;
  std::vector<std::vector<int32_t>> texts;
  for (int i = 0; i < 7; ++i) {
    others.push_back(d->open());
    texts.push_back(testing::random_tokens(120, 20 + i, kVocab));
  }
  std::vector<size_t> fed(others.size(), 0);
  for (size_t i = 4; i < others.size(); ++i) {
    fed[i] = 30 + 7 * i;
    d->step(std::vector<SequenceChunk>{{others[i], piece(texts[i], 0, fed[i])}});
  }
  std::vector<std::vector<float>> got;
  for (size_t step = 0; step <= next.size(); ++step) {
    std::vector<SequenceChunk> chunks;
    size_t mine = 0;
    for (size_t i = 0; i < others.size(); ++i) {
      if (i == 3) {
        mine = chunks.size();
        chunks.push_back({s, step == 0 ? std::span<const int32_t>(prompt) : piece(next, step - 1, 1)});
      }
      const size_t n = i < 4 ? 5 + 3 * i : 1;  // prompt chunks of 5 .. 14 rows, or one token
      chunks.push_back({others[i], piece(texts[i], fed[i], n)});
      fed[i] += n;
    }
    got.push_back(row(d->step(chunks), mine));
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << "step " << i;
}

TEST_P(CudaBatchDecoderKernels, APromptsBitsAreTheSameWholeOrInChunksOrPasses) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto c = config(true);
  const auto weights = bf16_weights(c, 12);
  const std::vector<int32_t> prompt = testing::random_tokens(70, 5, kVocab), next = {9, 8};
  auto whole = make_cuda_batch_decoder(weights, cache_of(c, 16), options());
  const auto want = alone(*whole, prompt, next);

  auto chunked = make_cuda_batch_decoder(weights, cache_of(c, 16), options());
  const int64_t s = chunked->open();
  std::vector<float> last;
  size_t fed = 0;
  for (size_t n : {1, 16, 17, 36}) {
    last = chunked->step(std::vector<SequenceChunk>{{s, piece(prompt, fed, n)}});
    fed += n;
  }
  EXPECT_TRUE(last == want[0]) << "the prompt's last logits";
  for (size_t i = 0; i < next.size(); ++i) {
    EXPECT_TRUE(chunked->step(std::vector<SequenceChunk>{{s, piece(next, i, 1)}}) == want[i + 1]) << "token " << i;
  }

  // Passes of at most 24 rows: the prompt runs in three, the logits 1 row at a time.
  auto passes = make_cuda_batch_decoder(weights, cache_of(c, 16), options(24, 1));
  const auto in_passes = alone(*passes, prompt, next);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(in_passes[i] == want[i]) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaBatchDecoderKernels,
                         ::testing::Values(std::tuple{false, false, false}, std::tuple{false, true, false},
                                           std::tuple{true, false, false}, std::tuple{true, true, false},
                                           std::tuple{true, false, true}, std::tuple{true, true, true}),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool, bool>>& p) {
                           return std::string(std::get<0>(p.param) ? "TensorCores" : "CudaCores") +
                                  (std::get<1>(p.param) ? "Graphs" : "Eager") +
                                  (std::get<2>(p.param) ? "FusedEpilogues" : "");
                         });

// The fused epilogues (RoPE and the cache write, SwiGLU, the residual adds
// in the kernels that add the matmuls' slices) give the unfused layer's
// bits: prompts of 40 tokens (one fused pass) and 100 (past the split rows:
// unfused in both), then decode steps of both sequences, eager and replayed.
TEST(CudaBatchDecoder, FusedEpiloguesGiveTheUnfusedBits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const bool tied : {false, true}) {
    const auto c = config(tied);
    const auto weights = bf16_weights(c, 9);
    std::vector<std::vector<float>> outputs[2];
    for (const bool fused : {false, true}) {
      auto d = make_cuda_batch_decoder(weights, cache_of(c, 32), {.fused_epilogues = fused});
      const int64_t a = d->open(), b = d->open();
      const std::vector<int32_t> pa = testing::random_tokens(40, 3, kVocab), pb = testing::random_tokens(100, 4, kVocab);
      std::vector<std::vector<float>>& out = outputs[fused ? 1 : 0];
      out.push_back(d->step(std::vector<SequenceChunk>{{a, pa}}));
      out.push_back(d->step(std::vector<SequenceChunk>{{b, pb}}));
      for (int32_t t = 0; t < 4; ++t) {
        const int32_t ta = 5 + t, tb = 11 + t;
        out.push_back(d->step(std::vector<SequenceChunk>{{a, {&ta, 1}}, {b, {&tb, 1}}}));
      }
    }
    ASSERT_EQ(outputs[0].size(), outputs[1].size());
    for (size_t i = 0; i < outputs[0].size(); ++i) {
      EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << (tied ? "tied, " : "") << "step " << i;
    }
  }
}

TEST(CudaBatchDecoder, AFullCacheOrABadTokenFailsAndChangesNoPosition) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto c = config(false);
  const auto weights = bf16_weights(c, 5);
  auto d = make_cuda_batch_decoder(weights, cache_of(c, 3));
  EXPECT_EQ(d->blocks().num_blocks(), 3);
  const int64_t s = d->open(), t = d->open();
  const std::vector<int32_t> forty = testing::random_tokens(40, 1, kVocab), ten = testing::random_tokens(10, 2, kVocab);
  d->step(std::vector<SequenceChunk>{{s, forty}});
  try {
    d->step(std::vector<SequenceChunk>{{t, ten}});
    FAIL() << "ran past the cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 1 blocks of 16 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d->position(t), 0);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(kVocab)};
  EXPECT_THROW(d->step(std::vector<SequenceChunk>{{s, bad}}), Error);
  EXPECT_EQ(d->position(s), 40);
  // Nothing of the failed steps stayed behind: the next token's logits are a
  // fresh decoder's.
  const int32_t token = 7;
  const std::vector<float> got = d->step(std::vector<SequenceChunk>{{s, {&token, 1}}});
  auto fresh = make_cuda_batch_decoder(weights, cache_of(c, 3));
  const int64_t f = fresh->open();
  fresh->step(std::vector<SequenceChunk>{{f, forty}});
  EXPECT_TRUE(got == fresh->step(std::vector<SequenceChunk>{{f, {&token, 1}}}));
  d->close(s);
  d->step(std::vector<SequenceChunk>{{t, ten}});  // room again
  EXPECT_EQ(d->position(t), 10);
}

TEST(CudaBatchDecoder, ACacheLargerThanTheGpuFailsNamingTheSizes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto c = config(false);
  const auto weights = bf16_weights(c, 5);
  try {
    make_cuda_batch_decoder(weights, KvCacheOptions{400ull << 30, 16});
    FAIL() << "a 400 GiB cache";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the KV cache (400"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16 weights"), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
}

// KvCacheOptions::fit_device: a cache wanted larger than the device is cut
// to what the weights and activations leave, less the reserve, and decodes
// as any other; one wanted smaller than that keeps its size.
TEST(CudaBatchDecoder, AFittedCacheTakesWhatTheGpuHasLeft) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto c = config(false);
  const auto weights = bf16_weights(c, 5);
  size_t free_bytes = 0, total_bytes = 0;
  SPW_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t room = free_bytes - cuda_cache_reserve(total_bytes);
  {
    KvCacheOptions wanted{total_bytes + (1ull << 30), 16, true};
    auto d = make_cuda_batch_decoder(weights, wanted);
    // The tiny model's weights and activations take little beside the cache.
    EXPECT_LE(d->cache_bytes(), room);
    EXPECT_GT(d->cache_bytes(), room / 10 * 9) << d->description();
    size_t left = 0;
    SPW_CUDA(cudaMemGetInfo(&left, &total_bytes));
    EXPECT_GE(left + (256ull << 20), cuda_cache_reserve(total_bytes)) << "the reserve stays free";
    const int64_t s = d->open();
    const std::vector<int32_t> prompt = testing::random_tokens(40, 1, kVocab);
    auto fresh = make_cuda_batch_decoder(weights, cache_of(c, 3));
    const int64_t f = fresh->open();
    EXPECT_TRUE(d->step(std::vector<SequenceChunk>{{s, prompt}}) ==
                fresh->step(std::vector<SequenceChunk>{{f, prompt}}));
  }
  KvCacheOptions four = cache_of(c, 4);
  four.fit_device = true;
  EXPECT_EQ(make_cuda_batch_decoder(weights, four)->blocks().num_blocks(), 4);
}

TEST(CudaBatchDecoder, MakeBatchDecoderChoosesTheGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto c = config(false);
  const auto weights = bf16_weights(c, 5);
  for (const char* device : {"auto", "cuda"}) {
    const std::string description = make_batch_decoder(weights, cache_of(c, 4), device)->description();
    EXPECT_EQ(description.rfind("cuda:0 ", 0), 0u) << description;
    EXPECT_NE(description.find("4 blocks of 16 tokens"), std::string::npos) << description;
  }
  EXPECT_EQ(make_batch_decoder(weights, cache_of(c, 4), "cpu")->description().rfind("cpu, ", 0), 0u);
}

}  // namespace
}  // namespace spillway::infer
