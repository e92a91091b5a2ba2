// QLoRA's base quantized as it is made or read (model/qlora_stream.h) is
// bit for bit the base quantized after the whole model was made: the same
// NF4 codes and scales, the same float32 in the tensors kept; the targeted
// projections' float32 is never kept, and `original` gives it back as it
// was, even once the folder it was read from is gone.
#include "model/qlora_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "model/gguf_llama.h"
#include "model/llama_weights_io.h"
#include "model/lora.h"
#include "model/lora_io.h"
#include "model/qlora.h"
#include "model/weight_directory.h"
#include "testing/files.h"
#include "testing/llama.h"

namespace spillway::model {
namespace {

// Projections of 64 x 96: 96 NF4 blocks, a double-quantized scale block
// and a partial one.
LlamaConfig small() { return testing::llama_config(40, 64, 96, 2, 4, 2); }

LoraConfig on(const char* targets) {
  return {.rank = 2, .alpha = 4, .dropout = 0, .targets = parse_lora_targets(targets, "test")};
}

void expect_same_nf4(const ops::Nf4Tensor& a, const ops::Nf4Tensor& b, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(a.numel, b.numel);
  EXPECT_EQ(a.block, b.block);
  EXPECT_EQ(a.packed, b.packed);
  EXPECT_EQ(a.absmax, b.absmax);
  EXPECT_EQ(a.qabsmax, b.qabsmax);
  EXPECT_EQ(a.absmax2, b.absmax2);
  EXPECT_EQ(a.offset, b.offset);
}

// `streamed` against `whole` quantized after it was made: NF4 tensors
// alike, the kept tensors' values alike, the targeted ones held as names
// and shapes only, and made again as they were.
void expect_quantized_as_after(const StreamedBase& streamed, const LlamaWeights& whole, const LoraConfig& lora,
                               LoraBase storage) {
  LlamaWeights after = whole;
  const QuantizedBase q = quantize_lora_base(after, lora, storage, false);
  ASSERT_FALSE(q.names.empty());
  EXPECT_EQ(streamed.quantized.storage, storage);
  EXPECT_EQ(streamed.quantized.names, q.names);
  ASSERT_EQ(streamed.quantized.tensors.size(), q.tensors.size());
  for (size_t k = 0; k < q.tensors.size(); ++k) expect_same_nf4(streamed.quantized.tensors[k], q.tensors[k], q.names[k]);
  EXPECT_EQ(streamed.quantized.describe(), q.describe());
  const auto& got = streamed.weights.tensors();
  ASSERT_EQ(got.size(), whole.tensors().size());
  ASSERT_TRUE(streamed.quantized.original);
  for (size_t i = 0; i < got.size(); ++i) {
    const NamedTensor& want = whole.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got[i].name, want.name);
    EXPECT_EQ(got[i].shape, want.shape);
    const bool targeted = std::find(q.names.begin(), q.names.end(), want.name) != q.names.end();
    if (targeted) {
      EXPECT_TRUE(got[i].data.empty()) << "a targeted projection's float32 was kept";
      std::vector<float> again(want.data.size());
      streamed.quantized.original(i, again);
      EXPECT_EQ(again, want.data);
    } else {
      EXPECT_EQ(got[i].data, want.data);
    }
  }
}

class QloraStreamTest : public testing::TempDirTest {};

TEST_F(QloraStreamTest, ARandomBaseQuantizedAsDrawnIsTheOneQuantizedAfter) {
  for (LoraBase storage : {LoraBase::nf4, LoraBase::nf4_double}) {
    for (const char* targets : {"all", "q,v,down"}) {
      SCOPED_TRACE(std::string(lora_base_name(storage)) + " on " + targets);
      const LoraConfig lora = on(targets);
      expect_quantized_as_after(random_quantized_base(small(), 7, lora, storage), LlamaWeights::random(small(), 7),
                                lora, storage);
    }
  }
}

TEST_F(QloraStreamTest, ABaseQuantizedAsReadIsTheOneQuantizedAfter) {
  const LlamaWeights whole = LlamaWeights::random(small(), 11);
  const std::string f32 = file("f32"), bf16 = file("bf16"), sharded = file("sharded");
  save_llama(f32, whole);
  save_llama(bf16, whole, kDefaultMaxShardBytes, DType::bf16);
  save_llama(sharded, whole, 20000);  // one tensor a shard, and an index
  for (LoraBase storage : {LoraBase::nf4, LoraBase::nf4_double}) {
    for (const std::string& dir : {f32, bf16, sharded}) {
      SCOPED_TRACE(std::string(lora_base_name(storage)) + " from " + dir);
      const LoraConfig lora = on("all");
      expect_quantized_as_after(load_quantized_base(dir, lora, storage), load_llama(dir), lora, storage);
    }
  }
}

// A GGUF file (llama.cpp's q and k row order undone tensor by tensor), in
// float32 and in a quantized type: what load_llama reads whole.
TEST_F(QloraStreamTest, AGgufBaseQuantizedAsReadIsTheOneQuantizedAfter) {
  const LlamaWeights whole = LlamaWeights::random(small(), 17);
  for (const GgmlType type : {GgmlType::f32, GgmlType::q8_0}) {
    const std::string path = file(type == GgmlType::f32 ? "f32.gguf" : "q8_0.gguf");
    save_gguf_llama(path, whole, nullptr, type, "test");
    for (LoraBase storage : {LoraBase::nf4, LoraBase::nf4_double}) {
      SCOPED_TRACE(std::string(lora_base_name(storage)) + " from " + path);
      const LoraConfig lora = on("q,k,v,o,gate,up,down");
      expect_quantized_as_after(load_quantized_base(path, lora, storage), load_llama(path), lora, storage);
    }
  }
  // An adapter merged as each tensor is read, from the file.
  LoraWeights adapter = LoraWeights::init(small(), on("k,down"), 9);
  for (NamedTensor& t : adapter.tensors()) {
    for (size_t j = 0; j < t.data.size(); ++j) t.data[j] += 0.02f * static_cast<float>(j % 5);
  }
  const std::string path = file("f32.gguf");
  expect_quantized_as_after(load_quantized_base(path, on("all"), LoraBase::nf4, &adapter),
                            merge_lora(load_llama(path), adapter), on("all"), LoraBase::nf4);
}

// A LoRA checkpoint that starts the next run is its tuned model: each
// tensor merged as it is read equals the model merged whole.
TEST_F(QloraStreamTest, AnAdapterMergedAsReadIsTheModelMergedWhole) {
  const LlamaWeights whole = LlamaWeights::random(small(), 3);
  save_llama(file("base"), whole);
  LoraWeights adapter = LoraWeights::init(small(), on("q,up"), 5);
  for (NamedTensor& t : adapter.tensors()) {
    for (size_t j = 0; j < t.data.size(); ++j) t.data[j] += 0.01f * static_cast<float>(j % 7);  // B trained
  }
  const LlamaWeights merged = merge_lora(whole, adapter);
  const LoraConfig lora = on("q,k,v,o,gate,up,down");
  expect_quantized_as_after(load_quantized_base(file("base"), lora, LoraBase::nf4_double, &adapter), merged, lora,
                            LoraBase::nf4_double);
}

// A checkpoint reads the base again long after it was loaded, perhaps from
// a run's checkpoint that newer ones have replaced.
TEST_F(QloraStreamTest, TheOriginalIsReadAgainAfterItsFolderIsGone) {
  const LlamaWeights whole = LlamaWeights::random(small(), 13);
  save_llama(file("gone"), whole);
  const StreamedBase base = load_quantized_base(file("gone"), on("all"), LoraBase::nf4);
  std::filesystem::remove_all(file("gone"));
  const NamedTensor& w = whole.at("model.layers.1.mlp.down_proj.weight");
  std::vector<float> again(w.data.size());
  base.quantized.original(static_cast<size_t>(&whole.at(w.name) - whole.tensors().data()), again);
  EXPECT_EQ(again, w.data);
}

// The host holds the NF4 base and the kept tensors, never the targeted
// float32: with all seven projections that is the embedding, the head and
// the norms beside 4.5 bits a projection weight.
TEST_F(QloraStreamTest, TheHostHoldsTheNf4BaseAndTheKeptTensorsAlone) {
  const StreamedBase base = random_quantized_base(small(), 1, on("all"), LoraBase::nf4);
  uint64_t held = 0, whole = 0;
  for (const NamedTensor& t : base.weights.tensors()) {
    held += t.data.size() * sizeof(float);
    whole += static_cast<uint64_t>(t.shape.numel()) * sizeof(float);
  }
  EXPECT_EQ(held + base.quantized.f32_bytes(), whole);
  EXPECT_LT(held + base.quantized.bytes(), whole / 2);
  for (const std::string& name : base.quantized.names) EXPECT_TRUE(base.weights.at(name).data.empty()) << name;
}

TEST_F(QloraStreamTest, WithoutNf4NothingIsQuantized) {
  const StreamedBase base = random_quantized_base(small(), 1, on("all"), LoraBase::weights);
  EXPECT_TRUE(base.quantized.tensors.empty());
  for (const NamedTensor& t : base.weights.tensors()) EXPECT_EQ(t.data.size(), static_cast<size_t>(t.shape.numel()));
  EXPECT_EQ(base.weights.tensors()[0].data, LlamaWeights::random(small(), 1).tensors()[0].data);
}

}  // namespace
}  // namespace spillway::model
