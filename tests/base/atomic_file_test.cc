// AtomicFile: the destination holds either its old content or all of the
// new, whatever fails on the way, and no temporary is ever left behind.
#include "base/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/status.h"
#include "testing/files.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;
using testing::FileSizeLimit;
using testing::read_bytes;

class AtomicFileTest : public testing::TempDirTest {};

// Random bytes, never all zero, so a file of zeros or of the old content
// cannot pass for the new one.
std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  if (n > 0) bytes[n / 2] = '\x5a';
  return bytes;
}

// Runs `f`, which must throw Error about `thing` whose message holds `word`.
template <typename F>
void expect_error(F&& f, const std::string& thing, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with '" << word << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), thing);
    const std::string what = e.what();
    EXPECT_NE(what.find(word), std::string::npos) << "no '" << word << "' in: " << what;
  }
}

TEST_F(AtomicFileTest, CommitReplacesTheContentWhole) {
  const std::string path = file("data.bin");
  write_text_file_atomically(path, random_bytes(333, 1));
  std::mt19937_64 rng(2);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, (size_t{1} << 20) + 3}) {
    const std::string old_bytes = read_bytes(path);
    const std::string bytes = random_bytes(n, 10 + n);
    AtomicFile f(path);
    EXPECT_TRUE(f.is_open());
    // Pieces of random odd sizes, so the file is the concatenation of writes.
    for (size_t at = 0; at < n;) {
      const size_t piece = std::min<size_t>(n - at, 1 + 2 * (rng() % 40000));
      f.write(bytes.data() + at, piece);
      at += piece;
    }
    // Before the commit the destination is untouched and the temporary sits beside it.
    EXPECT_EQ(read_bytes(path), old_bytes) << n;
    const auto names = listing();
    ASSERT_EQ(names.size(), 2u) << n;
    EXPECT_EQ(names[0], "data.bin");
    EXPECT_EQ(names[1].rfind("data.bin.tmp.", 0), 0u) << names[1];

    f.commit();
    EXPECT_FALSE(f.is_open());
    EXPECT_EQ(read_bytes(path), bytes) << n;
    EXPECT_EQ(listing(), std::vector<std::string>{"data.bin"}) << n;
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);  // not mkstemp's 0600
  }
}

TEST_F(AtomicFileTest, CallbackAndTextFormsWriteTheSameBytes) {
  const std::string bytes = random_bytes(70001, 3);
  write_file_atomically(file("pieces"), [&](FileSink& sink) {
    for (size_t at = 0; at < bytes.size(); at += 997) {
      sink.write(bytes.data() + at, std::min<size_t>(997, bytes.size() - at));
    }
  });
  write_text_file_atomically(file("text"), bytes);
  EXPECT_EQ(read_bytes(file("pieces")), bytes);
  EXPECT_EQ(read_bytes(file("text")), bytes);
  EXPECT_EQ(listing(), (std::vector<std::string>{"pieces", "text"}));
}

TEST_F(AtomicFileTest, UncommittedWriteLeavesTheOldFile) {
  const std::string path = file("keep.txt");
  const std::string old_bytes = random_bytes(513, 4);
  write_text_file_atomically(path, old_bytes);
  {
    AtomicFile f(path);
    f.write(random_bytes(2000, 5).data(), 2000);
  }
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.txt"});

  // A destination that did not exist is not created.
  { AtomicFile f(file("new.txt")); }
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.txt"});

  // After abandon() the file takes nothing more, so nothing can be committed.
  AtomicFile f(path);
  f.write("partial", 7);
  f.abandon();
  EXPECT_FALSE(f.is_open());
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.txt"});
  expect_error([&] { f.write("more", 4); }, path, "abandoned");
  expect_error([&] { f.commit(); }, path, "abandoned");
  EXPECT_EQ(read_bytes(path), old_bytes);
}

TEST_F(AtomicFileTest, FillThatThrowsLeavesTheOldFile) {
  const std::string path = file("keep.txt");
  const std::string old_bytes = random_bytes(77, 6);
  write_text_file_atomically(path, old_bytes);
  // The callback's own exception comes through, not an Error in its place.
  EXPECT_THROW(write_file_atomically(path,
                                     [](FileSink& sink) {
                                       sink.write("partial", 7);
                                       throw std::runtime_error("injected");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.txt"});
}

TEST_F(AtomicFileTest, MissingFolderIsNamedAndNothingIsCreated) {
  const std::string path = file("no_such_folder/x.bin");
  expect_error([&] { AtomicFile f(path); }, path, "cannot create the temporary file");
  expect_error([&] { write_text_file_atomically(path, "abc"); }, path, "No such file or directory");
  EXPECT_TRUE(listing().empty());
}

TEST_F(AtomicFileTest, FailedWriteKeepsTheOldFile) {
  const std::string path = file("model.bin");
  const std::string old_bytes = random_bytes(4096 + 5, 7);
  write_text_file_atomically(path, old_bytes);
  const std::string big = random_bytes(128 << 10, 8);
  {
    FileSizeLimit limit(64 << 10);
    AtomicFile f(path);
    expect_error([&] { f.write(big.data(), big.size()); }, path, "cannot write");
    // The failure already removed the temporary; committing now is refused.
    EXPECT_FALSE(f.is_open());
    EXPECT_EQ(listing(), std::vector<std::string>{"model.bin"});
    expect_error([&] { f.commit(); }, path, "abandoned");
    expect_error([&] { write_text_file_atomically(path, big); }, path, "cannot write");
  }
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.bin"});

  // Unhindered, the same write replaces the file whole.
  write_text_file_atomically(path, big);
  EXPECT_EQ(read_bytes(path), big);
}

TEST_F(AtomicFileTest, FailedRenameLeavesNoTemporary) {
  // A non-empty folder at the destination: the temporary is written and
  // synced, then the rename fails.
  fs::create_directory(file("occupied"));
  write_text_file_atomically(file("occupied/keep"), "k");
  AtomicFile f(file("occupied"));
  f.write("abc", 3);
  expect_error([&] { f.commit(); }, file("occupied"), "rename");
  EXPECT_FALSE(f.is_open());
  EXPECT_EQ(listing(), std::vector<std::string>{"occupied"});
  EXPECT_EQ(read_bytes(file("occupied/keep")), "k");
}

TEST_F(AtomicFileTest, ConcurrentWritesToOnePathUseTheirOwnTemporaries) {
  const std::string path = file("shared.bin");
  const std::string first = random_bytes(1001, 9);
  const std::string second = random_bytes(999, 10);
  AtomicFile a(path);
  AtomicFile b(path);
  a.write(first.data(), first.size());
  b.write(second.data(), second.size());
  EXPECT_EQ(listing().size(), 2u);  // two temporaries, no destination yet
  a.commit();
  EXPECT_EQ(read_bytes(path), first);
  b.commit();
  EXPECT_EQ(read_bytes(path), second);
  EXPECT_EQ(listing(), std::vector<std::string>{"shared.bin"});
}

TEST_F(AtomicFileTest, MovingHandsOverTheWrite) {
  const std::string bytes = random_bytes(3001, 11);
  AtomicFile a(file("moved.bin"));
  a.write(bytes.data(), 1000);
  AtomicFile b(std::move(a));
  EXPECT_FALSE(a.is_open());
  a.abandon();  // the moved-from file owns nothing, so this removes nothing
  b.write(bytes.data() + 1000, bytes.size() - 1000);

  // Assigning over an open write abandons it.
  AtomicFile c(file("dropped.bin"));
  c.write("xyz", 3);
  EXPECT_EQ(listing().size(), 2u);
  c = std::move(b);
  EXPECT_EQ(listing().size(), 1u);
  EXPECT_EQ(c.path(), file("moved.bin"));
  c.commit();
  EXPECT_EQ(read_bytes(file("moved.bin")), bytes);
  EXPECT_EQ(listing(), std::vector<std::string>{"moved.bin"});
}

TEST_F(AtomicFileTest, CommittedFileTakesNoMoreWrites) {
  const std::string path = file("done.txt");
  AtomicFile f(path);
  f.write("done", 4);
  f.commit();
  expect_error([&] { f.write("x", 1); }, path, "committed");
  expect_error([&] { f.commit(); }, path, "committed");
  EXPECT_EQ(read_bytes(path), "done");
}

TEST_F(AtomicFileTest, FsyncDirectoryNamesAMissingFolder) {
  fsync_directory(dir_);
  expect_error([&] { fsync_directory(file("absent")); }, file("absent"), "cannot open the folder");
}

}  // namespace
}  // namespace spillway
