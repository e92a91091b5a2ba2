// `spillway finetune --packing` end to end on the CPU: a micro model trained
// here, then tuned on instruction records packed several to a row. The
// packed step must be the unpacked step over the same examples (the same
// loss, the same gradient), and a packed run resumed from its checkpoint
// must continue bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/status.h"
#include "e2e/e2e_util.h"
#include "e2e/micro_base.h"
#include "model/llama_weights_io.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace spillway::e2e {
namespace {

// Alpaca records of a few words each, of varying lengths.
std::string make_chats(int records, uint64_t seed) {
  const std::vector<std::string> words = {"cat", "dog", "moon", "river", "house", "song", "road", "ball", "friend"};
  std::mt19937_64 rng(seed);
  auto phrase = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + words[rng() % words.size()];
    return s;
  };
  std::string out;
  for (int r = 0; r < records; ++r) {
    const int ask = 1 + static_cast<int>(rng() % 4), answer = 1 + static_cast<int>(rng() % 6);
    out += nlohmann::json({{"instruction", "Say " + phrase(ask)}, {"output", phrase(answer) + "."}}).dump() + "\n";
  }
  return out;
}

class PackingE2E : public ::testing::Test {
 protected:
  // A micro model with a tokenizer of its own, trained for a step: what the
  // runs below fine-tune.
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("packing_e2e");
    write_file(*dir_ / "chats.jsonl", make_chats(40, 5));
    train_micro_base(*dir_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // Fine-tuning on the chats, without validation or weight decay; AdamW's
  // epsilon far above the gradient's scale makes each update lr / eps times
  // the gradient, so the weights after a step show the gradient itself.
  static train::RunConfig finetune(const std::string& run, bool packing, int64_t batch, int64_t steps) {
    train::RunConfig o;
    o.run.out = *dir_ / run;
    o.model.init_from = *dir_ / "base";
    o.data.paths = {*dir_ / "chats.jsonl"};
    o.data.packing = packing;
    o.data.validation_fraction = 0;
    o.schedule.steps = steps;
    o.schedule.batch = batch;
    o.schedule.seq = 128;
    o.schedule.checkpoint_every = 0;
    o.schedule.seed = 21;
    o.optimizer.lr = 1.0;
    o.optimizer.min_lr = 1.0;
    o.optimizer.warmup = 0;
    o.optimizer.weight_decay = 0;
    o.optimizer.grad_clip = 0;
    o.optimizer.eps = 1e3;
    o.sample.tokens = 0;
    o.run.quiet = true;
    o.run.device = train::DeviceChoice::cpu;  // the tolerances are fp32's
    return o;
  }

  static nlohmann::json trainer_state(const std::string& checkpoint) {
    return nlohmann::json::parse(read_file(checkpoint + "/trainer_state.json"));
  }

  static ScratchDir* dir_;
};

ScratchDir* PackingE2E::dir_ = nullptr;

// The first packed step's examples, one a row in a batch of as many rows,
// make the same step: the same loss and, through the updates, the same
// gradient (to fp32's summation order).
TEST_F(PackingE2E, APackedStepIsTheUnpackedStepOfItsExamples) {
  const train::TrainResult packed = train::train_model(finetune("packed", true, 1, 1));
  const nlohmann::json state = trainer_state(packed.checkpoint);
  const auto examples = state["sampler"]["draws"].get<int64_t>();
  ASSERT_GT(examples, 2) << "the row should hold several examples";
  const train::TrainResult rows = train::train_model(finetune("rows", false, examples, 1));
  EXPECT_EQ(trainer_state(rows.checkpoint)["sampler"]["tokens_consumed"], state["sampler"]["tokens_consumed"]);

  const std::vector<double> a = step_losses(*dir_ / "packed"), b = step_losses(*dir_ / "rows");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NEAR(a[0], b[0], 1e-5 * b[0]);

  const model::LlamaWeights base = model::load_llama(train::resolve_checkpoint(*dir_ / "base"));
  const model::LlamaWeights wp = model::load_llama(packed.checkpoint), wr = model::load_llama(rows.checkpoint);
  float update = 0, difference = 0;
  for (size_t t = 0; t < base.tensors().size(); ++t) {
    const auto &w0 = base.tensors()[t].data, &p = wp.tensors()[t].data, &r = wr.tensors()[t].data;
    for (size_t i = 0; i < w0.size(); ++i) {
      update = std::max(update, std::abs(r[i] - w0[i]));
      difference = std::max(difference, std::abs((p[i] - w0[i]) - (r[i] - w0[i])));
    }
  }
  EXPECT_GT(update, 1e-6f);
  EXPECT_LT(difference, 1e-3f * update) << "largest update " << update;
}

// Two steps, a checkpoint, two more after --resume: the weights and losses
// of four steps straight, bit for bit.
TEST_F(PackingE2E, AResumedPackedRunContinuesBitIdentically) {
  const train::TrainResult straight = train::train_model(finetune("straight", true, 2, 4));
  train::RunConfig first = finetune("halves", true, 2, 4);
  first.schedule.stop_after = 2;
  train::train_model(first);
  train::RunConfig rest = finetune("halves", true, 2, 4);
  rest.run.resume = true;
  rest.data.packing = false;  // the checkpoint's choice wins, as for every checkpointed option
  const train::TrainResult resumed = train::train_model(rest);
  EXPECT_EQ(step_losses(*dir_ / "straight"), step_losses(*dir_ / "halves"));
  EXPECT_EQ(max_weight_difference(straight.checkpoint, resumed.checkpoint), 0.0f);
  EXPECT_EQ(trainer_state(straight.checkpoint)["sampler"], trainer_state(resumed.checkpoint)["sampler"]);
}

// A packed run's sampler state is replayed on resume: one altered by a
// single example is refused with one line naming the file.
TEST_F(PackingE2E, AnAlteredPackedSamplerStateIsRefused) {
  train::RunConfig first = finetune("altered", true, 2, 4);
  first.schedule.stop_after = 2;
  const train::TrainResult r = train::train_model(first);
  nlohmann::json state = trainer_state(r.checkpoint);
  state["sampler"]["draws"] = state["sampler"]["draws"].get<int64_t>() + 1;
  write_file(r.checkpoint + "/trainer_state.json", state.dump());
  train::RunConfig rest = finetune("altered", true, 2, 4);
  rest.run.resume = true;
  try {
    train::train_model(rest);
    FAIL() << "the altered state was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json: sampler.draws"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("steps of packed rows end"), std::string::npos) << e.what();
  }
}

TEST_F(PackingE2E, PackingTextIsRefusedWithOneLine) {
  const CommandResult r = run_spillway("train --packing --data " + *dir_ / "corpus.txt" + " -o " +
                                       *dir_ / "text" + " --steps 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: --packing: packs instruction examples into rows"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace spillway::e2e
