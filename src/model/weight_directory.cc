#include "model/weight_directory.h"

#include "base/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_text.h"
#include "base/status.h"

namespace spillway {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A shard must be a file directly in the directory: an index that names
// "../x" or "/etc/x" is refused rather than followed.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// "model-DDDDD-of-DDDDD.safetensors", the names save_pretrained gives shards.
bool is_shard_file_name(std::string_view name) {
  constexpr std::string_view prefix = "model-", middle = "-of-", suffix = ".safetensors";
  if (name.size() != prefix.size() + 5 + middle.size() + 5 + suffix.size()) return false;
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i) {
      if (name[i] < '0' || name[i] > '9') return false;
    }
    return true;
  };
  const size_t first = prefix.size(), second = first + 5 + middle.size();
  return name.starts_with(prefix) && digits(first) && name.substr(first + 5, middle.size()) == middle &&
         digits(second) && name.ends_with(suffix);
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPW_CHECK(in, path, "cannot open: ", std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SPW_CHECK(!in.bad(), path, "cannot read: ", std::strerror(errno));
  return text;
}

void remove_shards_except(const fs::path& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (is_shard_file_name(name) && !keep.contains(name)) fs::remove(entry.path(), ec);
  }
}

}  // namespace

std::string shard_file_name(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", index, count);
  return name;
}

WeightDirectory::WeightDirectory(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  SPW_CHECK(fs::exists(dir_, ec), dir_, "no such directory");
  SPW_CHECK(fs::is_directory(dir_, ec), dir_, "not a directory");
  const fs::path single = fs::path(dir_) / kSingleWeightsFile;
  const fs::path index = fs::path(dir_) / kWeightIndexFile;
  if (fs::exists(single, ec)) {
    open_single(single.string());
  } else if (fs::exists(index, ec)) {
    open_index(index.string());
  } else {
    throw Error(dir_, "holds neither " + std::string(kSingleWeightsFile) + " nor " +
                          std::string(kWeightIndexFile));
  }
}

void WeightDirectory::open_single(const std::string& file) {
  files_.push_back(std::make_unique<SafetensorsFile>(file));
  const SafetensorsFile* f = files_.back().get();
  for (const SafetensorsTensor& t : f->tensors()) entries_.emplace(t.name, WeightEntry{f, &t});
}

void WeightDirectory::open_index(const std::string& index) {
  sharded_ = true;
  const json doc = json_from_text(read_whole_file(index), index);
  SPW_CHECK(doc.is_object(), index, "is not a JSON object");
  auto metadata = doc.find("metadata");
  if (metadata != doc.end() && metadata->is_object()) {
    auto total = metadata->find("total_size");
    // Only reported, never enforced: transformers has written total_size
    // from parameter counts that disagree with the shards' bytes.
    if (total != metadata->end() && total->is_number_unsigned()) index_total_size_ = total->get<uint64_t>();
  }
  auto weight_map = doc.find("weight_map");
  SPW_CHECK(weight_map != doc.end() && weight_map->is_object(), index, "has no \"weight_map\" object");

  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [name, shard_value] : weight_map->items()) {
    SPW_CHECK(shard_value.is_string(), index, "weight_map entry for tensor '", name,
              "' is not a file name string");
    const std::string& shard = shard_value.get_ref<const std::string&>();
    SPW_CHECK(is_plain_file_name(shard), index, "shard '", shard, "' for tensor '", name,
              "' is not a file name inside the directory");
    auto it = opened.find(shard);
    if (it == opened.end()) {
      const fs::path shard_path = fs::path(dir_) / shard;
      std::error_code ec;
      SPW_CHECK(fs::exists(shard_path, ec), index, "shard '", shard, "' (listed for tensor '", name,
                "') is missing from ", dir_);
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
      it = opened.emplace(shard, files_.back().get()).first;
    }
    const SafetensorsTensor* t = it->second->find(name);
    SPW_CHECK(t != nullptr, index, "tensor '", name, "' is listed in shard '", shard,
              "' but that shard does not hold it");
    entries_.emplace(name, WeightEntry{it->second, t});
  }
}

std::vector<std::string> WeightDirectory::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const WeightEntry* WeightDirectory::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

const WeightEntry& WeightDirectory::at(std::string_view name) const {
  const WeightEntry* e = find(name);
  SPW_CHECK(e != nullptr, dir_, "no tensor '", name, "'");
  return *e;
}

void WeightDirectory::read_tensor_as_f32(std::string_view name, const Shape& expected,
                                         std::span<float> out) const {
  at(name).file->read_tensor_as_f32(name, expected, out);
}

void WeightDirectoryWriter::add(std::string name, DType dtype, Shape shape, const void* data) {
  // The checks SafetensorsWriter makes, made now: a bad tensor found while
  // writing the third shard would cost the two already written.
  SafetensorsWriter probe;
  probe.add(name, dtype, shape, data);
  SPW_CHECK(!tensors_.contains(name), name, "tensor added twice to one weight directory");
  const uint64_t bytes = probe.data_bytes();
  tensors_.emplace(std::move(name), Pending{dtype, std::move(shape), data, bytes, {}});
}

void WeightDirectoryWriter::add(std::string name, DType dtype, Shape shape, SafetensorsWriter::Fill fill) {
  SafetensorsWriter probe;
  probe.add(name, dtype, shape, fill);
  SPW_CHECK(!tensors_.contains(name), name, "tensor added twice to one weight directory");
  const uint64_t bytes = probe.data_bytes();
  tensors_.emplace(std::move(name), Pending{dtype, std::move(shape), nullptr, bytes, std::move(fill)});
}

std::vector<WeightDirectoryWriter::Group> WeightDirectoryWriter::groups(uint64_t max_shard_bytes) const {
  std::vector<Group> groups(1);
  uint64_t group_bytes = 0;
  for (const auto& item : tensors_) {
    if (!groups.back().empty() && group_bytes + item.second.bytes > max_shard_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(&item);
    group_bytes += item.second.bytes;
  }
  return groups;
}

SafetensorsWriter WeightDirectoryWriter::file_writer(const Group& group) {
  SafetensorsWriter writer;
  writer.add_metadata("format", "pt");
  for (const auto* item : group) {
    const Pending& p = item->second;
    if (p.fill) {
      writer.add(item->first, p.dtype, p.shape, p.fill);
    } else {
      writer.add(item->first, p.dtype, p.shape, p.data);
    }
  }
  return writer;
}

void WeightDirectoryWriter::walk(uint64_t max_shard_bytes) const {
  SPW_CHECK(max_shard_bytes > 0, "weight directory", "the shard size limit must be positive");
  for (const Group& group : groups(max_shard_bytes)) file_writer(group).walk();
}

std::vector<std::string> WeightDirectoryWriter::write(const std::string& dir, uint64_t max_shard_bytes) const {
  SPW_CHECK(max_shard_bytes > 0, dir, "the shard size limit must be positive");
  std::error_code ec;
  fs::create_directories(dir, ec);
  SPW_CHECK(!ec, dir, "cannot create the directory: ", ec.message());
  const fs::path folder(dir);

  const std::vector<Group> groups = this->groups(max_shard_bytes);
  uint64_t total_bytes = 0;
  for (const auto& item : tensors_) total_bytes += item.second.bytes;
  auto write_group = [&](const Group& group, const std::string& file_name) {
    file_writer(group).write((folder / file_name).string());
  };

  if (groups.size() == 1) {
    const std::string single(kSingleWeightsFile);
    write_group(groups[0], single);
    fs::remove(folder / kWeightIndexFile, ec);
    remove_shards_except(folder, {});
    return {single};
  }

  const int count = static_cast<int>(groups.size());
  std::vector<std::string> written;
  json weight_map = json::object();
  try {
    for (int i = 0; i < count; ++i) {
      const std::string shard = shard_file_name(i + 1, count);
      write_group(groups[static_cast<size_t>(i)], shard);
      written.push_back(shard);
      for (const auto* item : groups[static_cast<size_t>(i)]) weight_map[item->first] = shard;
    }
    // A leftover model.safetensors would be read instead of the index.
    fs::remove(folder / kSingleWeightsFile, ec);
    SPW_CHECK(!ec, (folder / kSingleWeightsFile).string(),
              "cannot remove the stale single-file weights: ", ec.message());
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", std::move(weight_map)}};
    const std::string text = index.dump(2) + "\n";
    write_text_file_atomically((folder / kWeightIndexFile).string(), text);
  } catch (...) {
    for (const std::string& shard : written) fs::remove(folder / shard, ec);
    throw;
  }
  remove_shards_except(folder, std::set<std::string>(written.begin(), written.end()));
  written.push_back(std::string(kWeightIndexFile));
  return written;
}

}  // namespace spillway
