// A Hugging Face weight directory: either one `model.safetensors`, or
// `model.safetensors.index.json` ({"metadata": {"total_size": N},
// "weight_map": {tensor name: shard file}}) beside its shards
// `model-00001-of-0000N.safetensors`. Reading gives one lookup from tensor
// name to the mapped tensor whichever layout the directory uses; writing
// produces either layout, split at a byte limit as transformers'
// save_pretrained does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace spillway {

inline constexpr std::string_view kSingleWeightsFile = "model.safetensors";
inline constexpr std::string_view kWeightIndexFile = "model.safetensors.index.json";
// transformers' default max_shard_size, "5GB".
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

struct WeightEntry {
  const SafetensorsFile* file;
  const SafetensorsTensor* tensor;
};

class WeightDirectory {
 public:
  // Opens `dir`. When both files are present, model.safetensors wins, as in
  // transformers. With an index, the index is the truth: every tensor it
  // lists must be in its shard (an Error names both otherwise), and tensors a
  // shard holds that the index does not list are not offered.
  explicit WeightDirectory(std::string dir);

  const std::string& path() const { return dir_; }
  bool sharded() const { return sharded_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The index's metadata.total_size, when the directory has an index that gives one.
  std::optional<uint64_t> index_total_size() const { return index_total_size_; }

  std::vector<std::string> names() const;  // sorted
  // nullptr when no tensor has that name.
  const WeightEntry* find(std::string_view name) const;
  // Throws Error(dir, "no tensor '<name>'") when absent.
  const WeightEntry& at(std::string_view name) const;

  // SafetensorsFile::read_tensor_as_f32 on whichever file holds the tensor.
  void read_tensor_as_f32(std::string_view name, const Shape& expected, std::span<float> out) const;

 private:
  void open_single(const std::string& file);
  void open_index(const std::string& index);

  std::string dir_;
  bool sharded_ = false;
  std::optional<uint64_t> index_total_size_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, WeightEntry, std::less<>> entries_;
};

// Collects named tensors (model weights: f32 or bf16, any dtype
// SafetensorsWriter takes is accepted) and writes them as a weight directory.
// Like SafetensorsWriter it references the bytes, which must stay valid and
// unchanged until write() returns.
class WeightDirectoryWriter {
 public:
  void add(std::string name, DType dtype, Shape shape, const void* data);
  // A tensor made when its file is written (SafetensorsWriter's Fill).
  void add(std::string name, DType dtype, Shape shape, SafetensorsWriter::Fill fill);

  // Writes into `dir` (created if missing). Tensors totalling at most
  // `max_shard_bytes` go into one model.safetensors; more are split, in name
  // order, into shards of at most that many bytes each (a tensor larger than
  // the limit gets a shard of its own) plus the index, which is written last.
  // Every file is written atomically, each shard's metadata says
  // {"format": "pt"} (transformers refuses other formats), and files of the
  // other layout or of an earlier, longer shard series are removed so that a
  // reader cannot pick up stale weights. If a shard fails, the shards written
  // by this call are removed and the Error propagates; an earlier index then
  // names missing shards rather than silently mixing old and new weights.
  // Returns the file names written, the index last when there is one.
  std::vector<std::string> write(const std::string& dir, uint64_t max_shard_bytes = kDefaultMaxShardBytes) const;
  // Calls every Fill in the order write() would and writes nothing
  // (SafetensorsWriter::walk).
  void walk(uint64_t max_shard_bytes = kDefaultMaxShardBytes) const;

 private:
  struct Pending {
    DType dtype;
    Shape shape;
    const void* data;
    uint64_t bytes;
    SafetensorsWriter::Fill fill;  // where data is null
  };
  using Group = std::vector<const std::pair<const std::string, Pending>*>;
  // The tensors of each file, in name order, a new file where the next would
  // pass max_shard_bytes.
  std::vector<Group> groups(uint64_t max_shard_bytes) const;
  static SafetensorsWriter file_writer(const Group& group);
  std::map<std::string, Pending> tensors_;
};

// "model-00002-of-00005.safetensors": shard `index` (from 1) of `count`.
std::string shard_file_name(int index, int count);

}  // namespace spillway
