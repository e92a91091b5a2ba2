// A model whose sizes are valid but larger than the process may allocate:
// one line saying "out of memory" in plain words, exit 1, never `terminate`.
// The address space is limited (ulimit -v) in the child's shell, so that
// the allocation fails the same way on every machine.
#include <gtest/gtest.h>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

TEST(OutOfMemory, WeightsTooLargeForTheAddressSpaceSaySo) {
  ScratchDir dir("out_of_memory");
  write_file(dir / "corpus.txt", make_corpus(200, 3));
  // 230M parameters: 915 MiB for the weights and as much for each AdamW
  // moment, beyond a 2 GB address space once the process's own mappings
  // are counted (a CUDA build's libraries take about 1.3 GB of it).
  write_file(dir / "big.json", R"({"vocab_size": 300, "hidden_size": 1024, "intermediate_size": 4096,
    "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 2, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true})");
  const CommandResult r = run_command("ulimit -v 2000000; timeout 120 " + std::string(SPILLWAY_BIN) +
                                      " train --config " + (dir / "big.json") + " --vocab 300 --data " +
                                      (dir / "corpus.txt") + " --separator % --steps 1 --batch 1 --seq 16" +
                                      " --sample-tokens 0 --device cpu --out " + (dir / "r"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  const size_t at = r.out.find("spillway: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(at),
            "spillway: model weights: out of memory: this machine could not allocate 913.30 MiB for the f32 "
            "parameters of a model of 16 layers and hidden size 1024\n");
}

}  // namespace
}  // namespace spillway::e2e
