// `spillway plan` through the command line: what it prints for a step that
// does not fit the GPU, how --batch auto splits an optimizer step, and the
// plan of data parallelism over --gpus N.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

double predicted_mfu(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("predicted on [^\\n]* MFU ([0-9.]+)"))) << out;
  return m.empty() ? 0 : std::stod(m[1]);
}

// An 8B step in 24 GiB: 64 sequences per optimizer step, as one micro-batch
// each or split as the planner finds fastest. The split keeps the tokens
// per step and is never predicted slower than one sequence per micro-batch.
// Atomic attention, as bench/gpu_offload.sh runs it: the ordered backward's
// 4 GiB workspace does not fit beside the rest in 24 GiB.
TEST(PlanE2E, BatchAutoKeepsTheTokensAndPredictsNoSlowerStep) {
  const std::string common =
      " --config llama3-8b --seq 8192 --grad-accum 64 --device-mem 24GiB --host-mem 110GiB --bf16-moments "
      "--recompute layers --nondeterministic";
  const CommandResult one = run_spillway("plan --batch 1" + common);
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const CommandResult chosen = run_spillway("plan --batch auto" + common);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.out;
  EXPECT_NE(chosen.out.find("(auto)"), std::string::npos) << chosen.out;
  EXPECT_NE(chosen.out.find("= 524288 tokens per optimizer step"), std::string::npos) << chosen.out;
  EXPECT_GE(predicted_mfu(chosen.out), predicted_mfu(one.out));
  // Where it does not fit whole, the plan says where each part lives and
  // how long the copies make compute wait.
  EXPECT_NE(one.out.find("gradient sums at home"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("waiting for copies"), std::string::npos) << one.out;
}

// LLaMA-3-8B on 2 and 4 GPUs of one host: --grad-accum counts the
// micro-batches of all GPUs, the host's memory is shared evenly, the state is
// sharded where each GPU then keeps its share, and what each GPU sends is said.
TEST(PlanE2E, GpusShareTheStepTheHostAndTheState) {
  const std::string common = " --config llama3-8b --seq 8192 --batch 1 --grad-accum 8 --host-mem 400GiB --recompute auto";
  const CommandResult two = run_spillway("plan --gpus 2 --gpu H200 --device-mem 139GiB" + common);
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_NE(two.out.find("x 4 micro-batches = 32768 tokens per optimizer step per GPU"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("data parallel over 2 GPUs: the masters' rest and AdamW's moments sharded"),
            std::string::npos)
      << two.out;
  EXPECT_NE(two.out.find("of 200.00 GiB"), std::string::npos) << two.out;  // the host's 400 GiB over 2
  // Every level side by side, the chosen one marked.
  for (const char* level : {"none", "optimizer", "gradients", "weights"}) {
    EXPECT_NE(two.out.find(std::string("  --shard ") + level), std::string::npos) << level << "\n" << two.out;
  }
  EXPECT_NE(two.out.find("(chosen)"), std::string::npos) << two.out;
  // Sharding that cannot keep the state on 80 GB cards: each keeps it whole.
  const CommandResult whole = run_spillway("plan --gpus 2 --tp 1 --device-mem 79GiB --shard none" + common);
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_NE(whole.out.find("every GPU keeps the whole training state"), std::string::npos) << whole.out;
  const CommandResult uneven = run_spillway("plan --gpus 3" + common);
  EXPECT_EQ(uneven.exit_code, 1) << uneven.out;
  EXPECT_NE(uneven.out.find("--grad-accum: 8 micro-batches do not split evenly over 3 data-parallel ranks"),
            std::string::npos)
      << uneven.out;
}

// Tensor parallelism in the plan: a rank's step of --tp T beside N/T-way
// data parallelism, every split of the GPUs into groups planned side by
// side with the fastest marked, and a degree that does not divide the GPUs
// refused.
TEST(PlanE2E, TensorParallelLayoutsArePlannedSideBySide) {
  const std::string common = " --config llama3-8b --seq 8192 --batch 1 --grad-accum 8 --host-mem 400GiB --device-mem 78GiB";
  const CommandResult split = run_spillway("plan --gpus 4 --tp 2" + common);
  ASSERT_EQ(split.exit_code, 0) << split.out;
  EXPECT_NE(split.out.find("tensor parallel over 2 GPUs with sequence parallelism"), std::string::npos) << split.out;
  EXPECT_NE(split.out.find("data parallel over 2 GPUs"), std::string::npos) << split.out;
  EXPECT_NE(split.out.find("x 4 micro-batches"), std::string::npos) << split.out;  // 8 over 2 data-parallel ranks
  for (const char* layout : {"--tp 1  x dp 4 ", "--tp 2  x dp 2 ", "--tp 4  x dp 1 "}) {
    EXPECT_NE(split.out.find(layout), std::string::npos) << layout << "\n" << split.out;
  }
  const size_t fastest = split.out.find("(fastest)");
  ASSERT_NE(fastest, std::string::npos) << split.out;
  EXPECT_EQ(split.out.find("(fastest)", fastest + 1), std::string::npos) << split.out;
  const CommandResult three = run_spillway("plan --gpus 4 --tp 3" + common);
  EXPECT_EQ(three.exit_code, 1) << three.out;
  EXPECT_NE(three.out.find("--tp: 3 does not divide the 4 GPUs"), std::string::npos) << three.out;
}

// GPUs over several hosts: each host's memory shared by its own GPUs, the
// ring at the network's rate unless --link-rate gives the measured one, and
// a slower link a longer wait.
TEST(PlanE2E, HostsShareTheirMemoryAndTheLinkRateSetsTheWait) {
  const std::string common = " --config llama3-8b --seq 8192 --batch 1 --grad-accum 8 --host-mem 400GiB --recompute auto";
  const CommandResult one_host = run_spillway("plan --gpus 4" + common);
  ASSERT_EQ(one_host.exit_code, 0) << one_host.out;
  EXPECT_NE(one_host.out.find("at 150 GB/s (the NVIDIA H100 80GB HBM3's NVLink, measured)"), std::string::npos)
      << one_host.out;
  // No degree given: the layouts searched, the fastest chosen.
  EXPECT_NE(one_host.out.find("layouts of the 4 GPUs (dp x pp x cp x tp, tp innermost)"), std::string::npos)
      << one_host.out;
  EXPECT_NE(one_host.out.find("(chosen)"), std::string::npos) << one_host.out;
  // --tp 1: data parallelism alone, not the layout the search would choose.
  const CommandResult two_hosts = run_spillway("plan --gpus 4 --hosts 2 --tp 1" + common);
  ASSERT_EQ(two_hosts.exit_code, 0) << two_hosts.out;
  EXPECT_NE(two_hosts.out.find("data parallel over 4 GPUs on 2 hosts"), std::string::npos) << two_hosts.out;
  EXPECT_NE(two_hosts.out.find("of 200.00 GiB"), std::string::npos) << two_hosts.out;  // 400 GiB over 2 GPUs a host
  EXPECT_NE(two_hosts.out.find("at 50 GB/s (a 400 Gb/s network link per GPU, assumed"), std::string::npos)
      << two_hosts.out;
  auto waited = [](const std::string& out) {
    const size_t at = out.find("the step waits ");
    EXPECT_NE(at, std::string::npos) << out;
    return std::stod(out.substr(at + sizeof "the step waits " - 1));
  };
  const CommandResult given = run_spillway("plan --gpus 4 --hosts 2 --tp 1 --link-rate 10" + common);
  ASSERT_EQ(given.exit_code, 0) << given.out;
  EXPECT_NE(given.out.find("at 10 GB/s (given)"), std::string::npos) << given.out;
  // A fifth of the rate: the same bytes, less of them hidden under the backward pass.
  EXPECT_GT(waited(given.out), 5 * waited(two_hosts.out));
  const CommandResult uneven = run_spillway("plan --gpus 4 --hosts 3" + common);
  EXPECT_EQ(uneven.exit_code, 1);
  EXPECT_NE(uneven.out.find("spillway: --hosts: 4 GPUs do not split evenly over 3 hosts"), std::string::npos)
      << uneven.out;
  const CommandResult zero = run_spillway("plan --gpus 4 --link-rate -1" + common);
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_NE(zero.out.find("spillway: --link-rate: -1 GB/s is not a rate a link has"), std::string::npos) << zero.out;
  // A host budget no layout fits: the need named is one layout's, and said so.
  const CommandResult small_host = run_spillway("plan --config llama3-8b --seq 2048 --gpus 2 --host-mem 6GiB");
  EXPECT_EQ(small_host.exit_code, 1);
  EXPECT_NE(small_host.out.find("spillway: --host-mem: no layout of the 2 GPUs fits; the likeliest, dp "),
            std::string::npos)
      << small_host.out;
}

// --largest finds the most layers of a width that the budgets hold: that
// many plan, one more does not.
TEST(PlanE2E, LargestIsTheMostLayersThatFit) {
  ScratchDir dir("plan_largest");
  const std::string budgets = " --seq 512 --batch 1 --grad-accum 1 --device-mem 6GiB --host-mem 16GiB";
  const CommandResult largest = run_spillway("plan --config llama3.2-1b --largest" + budgets);
  ASSERT_EQ(largest.exit_code, 0) << largest.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(largest.out, m, std::regex("the largest that fits: llama3.2-1b with ([0-9]+) layers")))
      << largest.out;
  const int layers = std::stoi(m[1]);
  EXPECT_GT(layers, 1);
  for (const int l : {layers, layers + 1}) {
    const std::string config = dir / ("layers" + std::to_string(l) + ".json");
    write_file(config, R"({"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "max_position_embeddings": 131072, "tie_word_embeddings": true, "num_hidden_layers": )" +
                           std::to_string(l) + "}");
    const CommandResult r = run_spillway("plan --config " + config + budgets);
    EXPECT_EQ(r.exit_code, l == layers ? 0 : 1) << r.out;
  }
}

// Over GPUs, --largest's side-by-side sharding levels each plan the largest
// model they fit: each line says how large, the chosen one the headline's.
TEST(PlanE2E, LargestOverGpusSaysTheModelEachShardingLevelFits) {
  const CommandResult r = run_spillway(
      "plan --config llama3.2-1b --largest --gpus 2 --seq 512 --batch 1 --grad-accum 2 --device-mem 8GiB "
      "--host-mem 40GiB");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("the largest that fits: llama3.2-1b with ([0-9]+) layers")))
      << r.out;
  const std::string headline = m[1];
  const std::regex level("--shard [a-z]+ +([0-9]+) layers? \\([0-9.]+ B\\): [^\n]*");
  int levels = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), level); it != std::sregex_iterator(); ++it) {
    ++levels;
    if (it->str().find("(chosen)") != std::string::npos) {
      EXPECT_EQ((*it)[1].str(), headline) << it->str();
    }
  }
  EXPECT_EQ(levels, 4) << r.out;
}

// LoRA of LLaMA-3-8B at seq 4096 (rank 16, all seven projections): what
// its step takes on the device, every activation kept in 80 GiB; in 32 GiB
// only an NF4 base with whole layers recomputed fits; in 8 GiB nothing does,
// in one line.
TEST(PlanE2E, LoraStepsArePlannedOnOneGpu) {
  const std::string common = " --config llama3-8b --seq 4096 --batch 1 --lora-rank 16 --lora-targets all";
  const CommandResult lora = run_spillway("plan" + common);
  ASSERT_EQ(lora.exit_code, 0) << lora.out;
  EXPECT_NE(lora.out.find("LoRA rank 16 on 224 projections"), std::string::npos) << lora.out;
  EXPECT_NE(lora.out.find("of 80.00 GiB: base 14.96 GiB (bf16)"), std::string::npos) << lora.out;
  EXPECT_NE(lora.out.find("recomputation: none"), std::string::npos) << lora.out;
  const CommandResult bf16 = run_spillway("plan --device-mem 32GiB" + common);
  EXPECT_EQ(bf16.exit_code, 0) << bf16.out;
  EXPECT_NE(bf16.out.find("recomputation: layers"), std::string::npos) << bf16.out;
  const CommandResult nf4 = run_spillway("plan --device-mem 32GiB --lora-base nf4" + common);
  ASSERT_EQ(nf4.exit_code, 0) << nf4.out;
  EXPECT_NE(nf4.out.find("recomputation: none"), std::string::npos) << nf4.out;
  const CommandResult none = run_spillway("plan --device-mem 8GiB" + common);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.out.find("spillway: --device-mem: a LoRA step needs "), std::string::npos) << none.out;
  const CommandResult two = run_spillway("plan --gpus 2" + common);
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_NE(two.out.find("spillway: --gpus: LoRA is planned for one GPU"), std::string::npos) << two.out;
}

}  // namespace
}  // namespace spillway::e2e
