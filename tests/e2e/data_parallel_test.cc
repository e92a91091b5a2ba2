// Data-parallel training on the CPU backend, ranks as processes, through
// the command line users get: `--nproc-per-node N`, or a launcher's
// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as torchrun sets
// them. N ranks train what one rank trains, a resumed run continues on any
// number of ranks, and a rank that dies or hangs ends the run with an error.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/processes.h"

namespace spillway::e2e {
namespace {

using namespace std::chrono_literals;

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SPILLWAY_HAS_GLOO
    GTEST_SKIP() << "built without Gloo: the CPU backend runs one rank";
#endif
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  // Four micro-batches of 2 x 32 tokens an optimizer step, over any ranks.
  std::string train_args(const std::string& out, int steps) {
    return "train --config " + (dir_ / "micro.json") + " --vocab 300 --data " + (dir_ / "corpus.txt") +
           " --separator % --batch 2 --seq 32 --grad-accum 4 --steps " + std::to_string(steps) +
           " --eval-every 5 --checkpoint-every 5 --sample-tokens 0 --lr 1e-2 --warmup 2 --quiet --out " + (dir_ / out);
  }
  std::vector<std::string> arg_list(const std::string& out, int steps) {
    return words_of(train_args(out, steps));
  }
  void train(const std::string& out, int steps, const std::string& more) {
    const CommandResult r = run_spillway(train_args(out, steps) + " " + more);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // The ranks sum the micro-batches' gradients in another order than one
  // rank does (per rank, then over ranks), so float rounding differs: after
  // ten AdamW steps at lr 1e-2 the weights differ by ~2e-7 (measured with 2
  // and 4 ranks); ranks training the wrong share move the losses by ~1e-2.
  void expect_same_training(const std::string& a, const std::string& b) {
    const std::vector<double> la = step_losses(dir_ / a), lb = step_losses(dir_ / b);
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_FALSE(la.empty());
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * la[i]) << "step " << i + 1;
    EXPECT_LT(max_weight_difference(dir_ / (a + "/step-0000010"), dir_ / (b + "/step-0000010")), 2e-6f);
  }
  // The validation losses of a run's evaluations.
  std::vector<double> eval_losses(const std::string& run) {
    std::istringstream log(read_file(dir_ / (run + "/train_log.jsonl")));
    std::vector<double> losses;
    for (std::string line; std::getline(log, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.value("event", "") == "eval") losses.push_back(j["val_loss"].get<double>());
    }
    return losses;
  }
  // Runs whose sums add the same numbers in the same order: the same losses,
  // evaluations and last checkpoint, bit for bit.
  void expect_same_bits(const std::string& a, const std::string& b) {
    EXPECT_EQ(step_losses(dir_ / a), step_losses(dir_ / b)) << a << " vs " << b;
    EXPECT_EQ(eval_losses(a), eval_losses(b)) << a << " vs " << b;
    EXPECT_EQ(eval_losses(a).size(), 2u) << a;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      EXPECT_EQ(read_file(dir_ / (a + "/step-0000010/" + file)), read_file(dir_ / (b + "/step-0000010/" + file)))
          << a << " vs " << b << ": " << file;
    }
  }
  ScratchDir dir_{"data_parallel"};
};

TEST_F(DataParallel, TwoAndFourRanksTrainWhatOneRankTrains) {
  train("one", 10, "");
  train("two", 10, "--nproc-per-node 2");
  train("four", 10, "--nproc-per-node 4 --dp 4");
  expect_same_training("one", "two");
  expect_same_training("one", "four");
  // The lead rank alone writes the run's files.
  EXPECT_EQ(step_losses(dir_ / "two").size(), 10u);
  EXPECT_TRUE(fs::exists(dir_ / "two/step-0000010/model.safetensors"));
}

TEST_F(DataParallel, RanksWithADeviceBudgetOffloadAndMatch) {
  train("one", 10, "--device-mem 200KiB");
  train("two", 10, "--device-mem 200KiB --nproc-per-node 2");
  expect_same_training("one", "two");
}

// Each rank keeping and updating a share of AdamW's state (--shard
// optimizer) trains what every rank keeping it whole does: on two ranks the
// same bits (a two-rank sum adds the same two numbers either way), on four
// what one rank trains, with and without a device budget; a sharded run
// resumes on another number of ranks, sharded or not.
TEST_F(DataParallel, ShardedOptimizerStateTrainsWhatWholeStateTrains) {
  train("whole", 10, "--nproc-per-node 2 --shard none");
  train("sharded", 10, "--nproc-per-node 2 --shard optimizer");
  EXPECT_EQ(step_losses(dir_ / "whole"), step_losses(dir_ / "sharded"));
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(read_file(dir_ / ("whole/step-0000010/" + std::string(file))),
              read_file(dir_ / ("sharded/step-0000010/" + std::string(file))))
        << file;
  }
  train("one", 10, "");
  train("four", 10, "--nproc-per-node 4 --shard optimizer");
  expect_same_training("one", "four");
  train("four-budget", 10, "--nproc-per-node 4 --shard optimizer --device-mem 200KiB");
  expect_same_training("one", "four-budget");
  train("resharded", 10, "--nproc-per-node 4 --shard optimizer --stop-after 5");
  train("resharded", 10, "--nproc-per-node 2 --shard optimizer --resume --stop-after 8");
  train("resharded", 10, "--resume");
  expect_same_training("one", "resharded");
}

// Each rank keeping a share of the gradient sums too (--shard gradients,
// ZeRO-2: each micro-batch's gradients reduce-scattered into them) or of
// the weights as well (--shard weights, ZeRO-3: the whole weights gathered
// before each micro-batch and evaluation) trains what one rank trains, with
// and without a device budget (which changes no bit). On four ranks a rank runs one micro-batch a
// step, whose reduce-scatter is ZeRO-1's reduction of the step's sums: the
// same bits as --shard optimizer. On two ranks, two micro-batches a rank
// are summed over the ranks one at a time instead of on each rank first:
// another rounding, within the fixture's tolerances (measured: the same
// losses, 2.8e-7 in the weights; a micro-batch left out, counted twice or
// added one element off moves the losses by 3e-2 to 5e-2 and the weights by
// 7e-2 to 1e-1, and a checkpoint of stale weights by 6e-4). Sharding the
// weights gathers them and sums nothing: the same bits as sharding the
// gradients, on any ranks.
TEST_F(DataParallel, ShardedGradientsAndWeightsTrainWhatOneRankTrains) {
  train("one", 10, "");
  train("four-optimizer", 10, "--nproc-per-node 4 --shard optimizer");
  expect_same_training("one", "four-optimizer");
  for (const std::string budget : {"", " --device-mem 200KiB"}) {
    for (const std::string shard : {"gradients", "weights"}) {
      const std::string run = shard + (budget.empty() ? "" : "-budget");
      train("four-" + run, 10, "--nproc-per-node 4 --shard " + shard + budget);
      expect_same_bits("four-optimizer", "four-" + run);
      train("two-" + run, 10, "--nproc-per-node 2 --shard " + shard + budget);
      expect_same_training("one", "two-" + run);
    }
    const std::string suffix = budget.empty() ? "" : "-budget";
    expect_same_bits("two-gradients" + suffix, "two-weights" + suffix);
  }
}

// A run saved with the weights sharded over four ranks resumes with the
// gradient sums sharded over two, then on one rank, as one rank's run goes
// on: checkpoints hold the whole state whatever the sharding.
TEST_F(DataParallel, AWeightShardedRunResumesOnOtherRanks) {
  train("one", 10, "");
  train("resharded", 10, "--nproc-per-node 4 --shard weights --stop-after 5");
  train("resharded", 10, "--nproc-per-node 2 --shard gradients --resume --stop-after 8");
  train("resharded", 10, "--resume");
  expect_same_training("one", "resharded");
}

TEST_F(DataParallel, ResumeContinuesOnAnyNumberOfRanks) {
  train("straight", 10, "--nproc-per-node 2");
  train("same", 10, "--nproc-per-node 2 --stop-after 5");
  train("same", 10, "--nproc-per-node 2 --resume");
  // On the same ranks, bit for bit.
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(read_file(dir_ / ("straight/step-0000010/" + std::string(file))),
              read_file(dir_ / ("same/step-0000010/" + std::string(file))))
        << file;
  }
  // On others, up to the order of the gradients' sums.
  train("other", 10, "--nproc-per-node 2 --stop-after 5");
  train("other", 10, "--nproc-per-node 4 --resume");
  expect_same_training("straight", "other");
}

// The link rate between ranks, measured over the same launcher and
// collective library training uses: every collective at every size has a
// positive rate, and the planner's is the largest all-reduce's.
TEST_F(DataParallel, BenchCollectivesMeasuresTheLinkRate) {
  const std::string json = dir_ / "collectives.jsonl";
  const CommandResult r = run_spillway("bench --collectives --nproc-per-node 2 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("collectives over 2 ranks on cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("link rate for the planner: "), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(j.at("ranks"), 2);
  ASSERT_EQ(j.at("ops").size(), 9u);  // three collectives at 1, 4 and 16 MiB
  double largest_all_reduce = 0;
  for (const auto& op : j.at("ops")) {
    EXPECT_GT(op.at("sent_gb_s").get<double>(), 0) << op.dump();
    if (op.at("op") == "all-reduce" && op.at("bytes") == 16u << 20) largest_all_reduce = op.at("sent_gb_s");
  }
  EXPECT_EQ(j.at("link_rate_gb_s").get<double>(), largest_all_reduce);

  const CommandResult alone = run_spillway("bench --collectives");
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_NE(alone.out.find("spillway: --collectives: times the links between ranks: start two or more"),
            std::string::npos)
      << alone.out;
}

// A profiled bench on several ranks shows every rank's own times: a
// collective one rank waits in is another rank's slower work.
TEST_F(DataParallel, BenchProfileShowsEveryRanksTimes) {
  const CommandResult r = run_spillway(
      "bench --config tiny --seq 32 --batch 2 --grad-accum 2 --steps 1 --warmup 0 --nproc-per-node 2 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\ntime by op (one profiled step):\n  attention "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1, time by op (one profiled step):\n  attention "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 0, time by op"), std::string::npos) << r.out;
}

TEST_F(DataParallel, MicroBatchesMustSplitEvenly) {
  const CommandResult r = run_spillway(train_args("uneven", 4) + " --nproc-per-node 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("do not split evenly over 3 data-parallel ranks"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "uneven/latest"));
}

TEST_F(DataParallel, AKilledRankEndsTheRunWithAnError) {
  const std::string log = dir_ / "spawned.log";
  std::vector<std::string> args = arg_list("killed", 100000);
  args.push_back("--nproc-per-node");
  args.push_back("2");
  const pid_t parent = start_spillway(args, {}, log);
  ASSERT_TRUE(wait_until_exists(dir_ / "killed/train_log.jsonl", 60s)) << read_file(log);
  // The ranks are the parent's children; kill the one started last.
  const std::vector<pid_t> ranks = ranks_of(parent);  // by pid
  ASSERT_EQ(ranks.size(), 2u);
  ::kill(ranks[1], SIGKILL);
  EXPECT_EQ(wait_for(parent, 60s), 1) << read_file(log);
  EXPECT_NE(read_file(log).find("rank 1: ended with signal 9; stopping the other ranks"), std::string::npos)
      << read_file(log);
}

// SIGINT to one rank (a terminal's Ctrl-C reaches every rank, a kill may
// reach one) or SIGTERM to --nproc-per-node's parent stops every rank at
// the same step, after the lead's checkpoint, with 128 + the signal and no
// rank reported as failed; the run resumes on ranks.
TEST_F(DataParallel, ASignalStopsEveryRankAfterOneResumableCheckpoint) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string run = sig == SIGINT ? "interrupted" : "terminated", log = dir_ / (run + ".log");
    std::vector<std::string> args = arg_list(run, 100000);
    args.insert(args.end(), {"--nproc-per-node", "2"});
    const pid_t parent = start_spillway(args, {}, log);
    ASSERT_TRUE(wait_until_exists(dir_ / (run + "/train_log.jsonl"), 60s)) << read_file(log);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (read_file(dir_ / (run + "/train_log.jsonl")).find("\"loss\"") == std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << read_file(log);
      std::this_thread::sleep_for(20ms);
    }
    const std::vector<pid_t> ranks = ranks_of(parent);
    ASSERT_EQ(ranks.size(), 2u);
    ::kill(sig == SIGINT ? ranks[1] : parent, sig);
    EXPECT_EQ(wait_for(parent, 60s), 128 + sig) << read_file(log);
    const std::string out = read_file(log);
    EXPECT_NE(out.find(sig == SIGINT ? "stopped by SIGINT after step " : "stopped by SIGTERM after step "),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("ended with"), std::string::npos) << out;

    std::string latest = read_file(dir_ / (run + "/latest"));
    latest = latest.substr(0, latest.find('\n'));
    ASSERT_TRUE(latest.starts_with("step-")) << latest;
    for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer_state.json", "tokenizer.json"}) {
      EXPECT_TRUE(fs::exists(dir_ / (run + "/" + latest + "/" + file))) << file;
    }
    const int64_t stopped_at = std::stoll(latest.substr(5));
    const CommandResult r = run_spillway(train_args(run, 100000) + " --nproc-per-node 2 --resume --stop-after " +
                                         std::to_string(stopped_at + 2));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("done: " + std::to_string(stopped_at + 2) + " steps"), std::string::npos) << r.out;
  }
}

// An out folder holding a run, or a finished run's resume, is refused
// before any rank starts: one error.
TEST_F(DataParallel, AnExistingOrFinishedRunIsRefusedOnceBeforeTheRanksStart) {
  train("existing", 2, "--nproc-per-node 2");
  for (const auto& [more, refusal] :
       {std::pair<std::string, std::string>{"", "holds a run already; continue it with --resume"},
        {" --resume", "the run is finished (step 2 of 2); nothing to resume"}}) {
    const CommandResult r = run_spillway(train_args("existing", 2) + " --nproc-per-node 2" + more);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    ASSERT_NE(r.out.find(refusal), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(refusal), r.out.rfind(refusal)) << r.out;
    EXPECT_EQ(r.out.find("ended with"), std::string::npos) << r.out;
  }
  EXPECT_EQ(step_losses(dir_ / "existing").size(), 2u);
}

// Without --nproc-per-node's parent to stop them, the other ranks find out
// for themselves: a peer's closed connection at once, a hung one after
// --rank-timeout.
TEST_F(DataParallel, SurvivorsOfALauncherStartedRunEndWithAnError) {
  for (const int sig : {SIGKILL, SIGSTOP}) {
    const std::string port = "MASTER_PORT=" + std::to_string(free_port()), run = "launched" + std::to_string(sig);
    std::vector<std::string> args = arg_list(run, 100000);
    args.push_back("--rank-timeout");
    args.push_back("3");
    const pid_t rank0 = start_spillway(args, {"RANK=0", "WORLD_SIZE=2", port}, dir_ / (run + "_0.log"));
    const pid_t rank1 = start_spillway(args, {"RANK=1", "WORLD_SIZE=2", port}, dir_ / (run + "_1.log"));
    ASSERT_TRUE(wait_until_exists(dir_ / (run + "/train_log.jsonl"), 60s)) << read_file(dir_ / (run + "_0.log"));
    ::kill(rank1, sig);
    EXPECT_EQ(wait_for(rank0, 60s), 1) << read_file(dir_ / (run + "_0.log"));
    const std::string out = read_file(dir_ / (run + "_0.log"));
    EXPECT_NE(out.find("spillway: rank 0"), std::string::npos) << out;
    EXPECT_NE(out.find("failed (a peer ended or timed out)"), std::string::npos) << out;
    ::kill(rank1, SIGKILL);
    ::waitpid(rank1, nullptr, 0);
  }
}

TEST_F(DataParallel, RanksThatDisagreeDoNotStart) {
  const std::string port = "MASTER_PORT=" + std::to_string(free_port());
  std::vector<std::string> args = arg_list("mismatch", 4);
  const pid_t rank0 = start_spillway(args, {"RANK=0", "WORLD_SIZE=2", port}, dir_ / "mismatch_0.log");
  args.push_back("--clip");
  args.push_back("0.5");
  const pid_t rank1 = start_spillway(args, {"RANK=1", "WORLD_SIZE=2", port}, dir_ / "mismatch_1.log");
  EXPECT_EQ(wait_for(rank0, 60s), 1);
  EXPECT_EQ(wait_for(rank1, 60s), 1) << read_file(dir_ / "mismatch_1.log");
  EXPECT_NE(read_file(dir_ / "mismatch_0.log").find("rank 1 resolved another run configuration than rank 0"),
            std::string::npos)
      << read_file(dir_ / "mismatch_0.log");
  EXPECT_FALSE(fs::exists(dir_ / "mismatch/latest"));
}

}  // namespace
}  // namespace spillway::e2e
