// A training run killed with SIGKILL at any moment, through the command line
// on a micro model that checkpoints every step: every step folder that
// exists is complete and loads, `latest` names one, `--resume` continues,
// and what the killed run left (half-written checkpoints, half-deleted ones,
// temporaries) is gone once the next run has started. Likewise for kills
// while an old checkpoint, or a run --overwrite replaces, is deleted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/processes.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer.h"
#include "train/checkpoint.h"

namespace spillway::e2e {
namespace {

using namespace std::chrono_literals;

// What a complete checkpoint folder holds (train/checkpoint.h).
const std::vector<std::string> kCheckpointFiles = {"config.json",          "model.safetensors",     "tokenizer.json",
                                                   "tokenizer_config.json", "optimizer.safetensors", "trainer_state.json"};

bool is_step_folder_name(const std::string& name) {
  return name.size() > 5 && name.starts_with("step-") &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

// A leftover of a killed run, identified by name and inode: a later run's
// temporary may reuse a name, never the same file.
using Leftovers = std::set<std::pair<std::string, ino_t>>;

class Kill : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(300, 5));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  std::vector<std::string> train_args(const std::string& extra) const {
    return words_of("train --config " + (dir_ / "micro.json") + " --vocab 300 --data " +
                             (dir_ / "corpus.txt") +
                             " --separator % --batch 2 --seq 16 --steps 100000 --checkpoint-every 1"
                             " --keep-checkpoints 2 --eval-batches 1 --sample-tokens 0 --threads 1 --quiet --out " +
                             run() + " " + extra);
  }
  std::string run() const { return dir_ / "run"; }
  std::string log() const { return dir_ / "out.log"; }

  // The checkpoint events in the run's log so far.
  int checkpoints_logged() const {
    std::istringstream lines(read_file(run() + "/train_log.jsonl"));
    int n = 0;
    for (std::string line; std::getline(lines, line);) n += line.find("\"checkpoint\"") != std::string::npos;
    return n;
  }
  // Temporaries and `.deleting` folders in the run folder now.
  Leftovers leftovers() const {
    Leftovers found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp.") == std::string::npos && !name.ends_with(".deleting")) continue;
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0) found.insert({name, st.st_ino});
    }
    return found;
  }
  // Every step folder is complete and loads; `latest`, where there is one,
  // names one. Returns the step `latest` names, or -1.
  int64_t expect_checkpoints_whole(const std::string& when) const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run(), ec)) {
      const std::string name = e.path().filename().string();
      if (!is_step_folder_name(name)) continue;
      const std::string dir = e.path().string();
      for (const std::string& file : kCheckpointFiles) {
        EXPECT_TRUE(fs::exists(dir + "/" + file)) << when << ": " << name << " lacks " << file;
      }
      try {
        const model::LlamaWeights weights = model::load_llama(dir);
        train::load_optimizer(dir, weights.config());
        const nlohmann::json state = train::load_trainer_state(dir);
        EXPECT_EQ(std::stoll(name.substr(5)), state.at("step").get<int64_t>()) << when << ": " << name;
        load_tokenizer(dir);
      } catch (const std::exception& err) {
        ADD_FAILURE() << when << ": " << name << " does not load: " << err.what();
      }
    }
    if (!fs::exists(run() + "/latest")) return -1;
    std::string named = read_file(run() + "/latest");
    while (!named.empty() && named.back() == '\n') named.pop_back();
    EXPECT_TRUE(is_step_folder_name(named) && fs::is_directory(run() + "/" + named))
        << when << ": latest names '" << named << "'";
    return is_step_folder_name(named) ? std::stoll(named.substr(5)) : -1;
  }
  // Polls `ready` until it holds, or fails after `limit`; gives up early
  // (false) when the process has ended.
  bool wait_until(pid_t pid, const std::function<bool()>& ready, std::chrono::seconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!ready()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
      std::this_thread::sleep_for(200us);
    }
    return true;
  }
  // SIGKILL, and the process must have been running until then.
  void kill_now(pid_t pid) const {
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the run ended by itself before the kill:\n" << read_file(log());
  }

  void kill_while_deleting(const std::string& folder, const std::string& extra);

  ScratchDir dir_{"kill"};
};

// Kills land at random moments: half a random time after the run's first
// checkpoint, half a random few hundred microseconds after a checkpoint
// (or an old checkpoint's deletion) has begun, which is where a kill hurts.
TEST_F(Kill, EveryCheckpointFolderIsWholeAfterAnyKill) {
  std::mt19937 rng(20261127);
  Leftovers before;  // what the previous kill left
  int kills = 0, writes = 0, mid_write = 0;
  while (kills < 40 || writes < 20) {
    ASSERT_LT(kills, 80) << "too few checkpoint writes between kills";
    const bool resume = train::is_run_folder(run());
    const int logged = resume ? checkpoints_logged() : 0;
    const pid_t pid = start_spillway(train_args(resume ? "--resume" : "--overwrite"), {}, log());
    if (kills % 2 == 0) {
      ASSERT_TRUE(wait_until(pid, [&] { return checkpoints_logged() > logged; }, 60s))
          << "no checkpoint after restart " << kills << ":\n" << read_file(log());
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    } else {
      // A temporary or `.deleting` folder of this run (not one the previous
      // kill left, which it removes at its start).
      auto writing = [&] {
        for (const auto& item : leftovers()) {
          if (item.first.starts_with("step-") && !before.contains(item)) return true;
        }
        return false;
      };
      ASSERT_TRUE(wait_until(pid, writing, 60s)) << "no checkpoint write after restart " << kills << ":\n"
                                                 << read_file(log());
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 600));
    }
    kill_now(pid);
    if (HasFatalFailure()) return;
    ++kills;
    const std::string when = "after kill " + std::to_string(kills);
    expect_checkpoints_whole(when);
    if (std::getenv("KILL_TEST_VERBOSE")) {
      std::printf("%s:", when.c_str());
      for (const auto& e : fs::directory_iterator(run())) std::printf(" %s", e.path().filename().c_str());
      std::printf("\n");
    }
    const Leftovers now = leftovers();
    for (const auto& item : before) EXPECT_FALSE(now.contains(item)) << when << ": " << item.first << " is stale";
    bool interrupted = false;
    for (const auto& item : now) interrupted |= item.first.starts_with("step-") && !before.contains(item);
    mid_write += interrupted;
    writes += checkpoints_logged() - logged + interrupted;
    before = now;
    if (HasFailure()) return;
  }
  // Kills that left a checkpoint half written or half deleted: the test
  // reached the moments it is about.
  EXPECT_GE(mid_write, 5);
  std::printf("%d kills over %d checkpoint writes, %d of them mid-write\n", kills, writes, mid_write);

  // The run resumes and ends cleanly: nothing left over, the newest
  // checkpoint named.
  const int64_t from = expect_checkpoints_whole("before the last run");
  ASSERT_GT(from, 0);
  const pid_t pid = start_spillway(train_args("--resume --stop-after " + std::to_string(from + 3)), {}, log());
  ASSERT_EQ(wait_for(pid, 120s), 0) << read_file(log());
  EXPECT_EQ(expect_checkpoints_whole("after the last run"), from + 3);
  EXPECT_TRUE(leftovers().empty()) << leftovers().begin()->first;
}

// Kills a run of `extra` while it deletes the step folder `folder`. Extra
// subfolders make the deletion long enough to land in and show its
// progress (a folder's link count falls as they go). The folder must then
// be whole or gone: a checkpoint leaves in one step.
void Kill::kill_while_deleting(const std::string& folder, const std::string& extra) {
  const std::string dir = run() + "/" + folder;
  ASSERT_TRUE(fs::is_directory(dir));
  constexpr int kPadding = 1500;
  for (int i = 0; i < kPadding; ++i) {
    const std::string sub = dir + "/padding-" + std::to_string(i);
    fs::create_directory(sub);
    for (int f = 0; f < 4; ++f) write_file(sub + "/" + std::to_string(f), "x");
  }
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  const nlink_t links = st.st_nlink;
  ASSERT_GE(links, static_cast<nlink_t>(kPadding));

  const pid_t pid = start_spillway(train_args(extra), {}, log());
  auto deleting = [&] { return ::stat(dir.c_str(), &st) != 0 || st.st_nlink < links; };
  ASSERT_TRUE(wait_until(pid, deleting, 60s)) << read_file(log());
  kill_now(pid);
  if (HasFatalFailure()) return;
  if (::stat(dir.c_str(), &st) == 0) {
    EXPECT_EQ(st.st_nlink, links) << folder << " is half deleted";
  }
  expect_checkpoints_whole("after the kill");
  EXPECT_FALSE(leftovers().empty()) << "the kill came after the deletion";
}

// An old checkpoint, removed as newer ones come, leaves in one step.
TEST_F(Kill, AnOldCheckpointLeavesInOneStep) {
  const pid_t first = start_spillway(train_args("--stop-after 2"), {}, log());
  ASSERT_EQ(wait_for(first, 120s), 0) << read_file(log());
  // Step 3's checkpoint removes step 1's (two are kept).
  kill_while_deleting("step-0000001", "--resume --stop-after 3");
  if (HasFatalFailure()) return;

  // The next run removes the half-deleted folder.
  const pid_t next = start_spillway(train_args("--resume --stop-after 4"), {}, log());
  ASSERT_EQ(wait_for(next, 120s), 0) << read_file(log());
  EXPECT_EQ(expect_checkpoints_whole("after the next run"), 4);
  EXPECT_TRUE(leftovers().empty()) << leftovers().begin()->first;
}

// --overwrite removes a run's checkpoints the same way, `latest` first: a
// kill midway leaves complete checkpoints, nothing naming a removed one.
TEST_F(Kill, AnOverwriteKilledMidwayLeavesNoHalfCheckpoint) {
  const pid_t first = start_spillway(train_args("--stop-after 2"), {}, log());
  ASSERT_EQ(wait_for(first, 120s), 0) << read_file(log());
  kill_while_deleting("step-0000001", "--overwrite --stop-after 1");
  if (HasFatalFailure()) return;
  EXPECT_FALSE(fs::exists(run() + "/latest"));

  const pid_t again = start_spillway(train_args("--overwrite --stop-after 1"), {}, log());
  ASSERT_EQ(wait_for(again, 120s), 0) << read_file(log());
  EXPECT_EQ(expect_checkpoints_whole("after the next run"), 1);
  EXPECT_TRUE(leftovers().empty()) << leftovers().begin()->first;
}

}  // namespace
}  // namespace spillway::e2e
