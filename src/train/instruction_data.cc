#include "train/instruction_data.h"

#include <algorithm>
#include <fstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "base/status.h"
#include "train/dataset.h"
#include "train/text_to_tokens.h"

namespace spillway::train {

namespace {

using nlohmann::json;

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r\n") == std::string_view::npos; }

json parse_record(const std::string& line, const std::string& where) {
  try {
    return json::parse(line);
  } catch (const json::parse_error& e) {
    throw Error(where, "not valid JSON (column " + std::to_string(e.byte) + "): " + json_parse_problem(e));
  }
}

// The string under `key`, or Error naming the key; `optional` gives "" when
// it is missing or null.
std::string text_field(const json& record, const char* key, const std::string& where, bool optional = false) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) {
    SPW_CHECK(optional, where, "the record has no \"", key, "\"");
    return {};
  }
  SPW_CHECK(it->is_string(), where, "\"", key, "\" is ", it->type_name(), ", not a string");
  return it->get<std::string>();
}

std::vector<ChatMessage> chat_messages(const json& list, const std::string& where) {
  SPW_CHECK(list.is_array() && !list.empty(), where, "\"messages\" is not a list of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string at = where + " message " + std::to_string(i);
    SPW_CHECK(m.is_object(), at, "is ", m.type_name(), ", not an object with \"role\" and \"content\"");
    out.push_back({text_field(m, "role", at), text_field(m, "content", at)});
    SPW_CHECK(!out.back().role.empty(), at, "has an empty role");
  }
  return out;
}

std::vector<ChatMessage> alpaca_messages(const json& record, const std::string& where) {
  std::string prompt = text_field(record, "instruction", where);
  const std::string input = text_field(record, "input", where, /*optional=*/true);
  if (!input.empty()) prompt += "\n\n" + input;
  return {{"user", std::move(prompt)}, {"assistant", text_field(record, "output", where)}};
}

}  // namespace

bool is_instruction_file(const std::string& path) {
  constexpr std::string_view kExtension = ".jsonl";
  if (path.size() < kExtension.size() || path.compare(path.size() - kExtension.size(), kExtension.size(), kExtension) != 0) {
    return false;
  }
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (blank(line)) continue;
    const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    return record.is_object() && (record.contains("messages") || record.contains("instruction"));
  }
  return false;
}

std::vector<ChatMessage> instruction_messages(const std::string& line, const std::string& where) {
  const json record = parse_record(line, where);
  SPW_CHECK(record.is_object(), where, "is ", record.type_name(),
            ", not a record with \"messages\" or \"instruction\" and \"output\"");
  std::vector<ChatMessage> messages;
  if (const auto it = record.find("messages"); it != record.end()) {
    messages = chat_messages(*it, where);
  } else {
    SPW_CHECK(record.contains("instruction"), where,
              "the record has neither \"messages\" nor \"instruction\" and \"output\"");
    messages = alpaca_messages(record, where);
  }
  bool replies = false;
  for (const ChatMessage& m : messages) replies = replies || (m.role == "assistant" && !blank(m.content));
  SPW_CHECK(replies, where, "the record has no assistant reply to learn from");
  return messages;
}

std::vector<InstructionExample> read_instruction_files(const std::vector<std::string>& paths,
                                                       const Tokenizer& tokenizer) {
  const ChatRendering format = chat_rendering_of(tokenizer);
  std::vector<InstructionExample> out;
  for (const std::string& path : paths) {
    std::ifstream in(path);
    SPW_CHECK(in.good(), path, "cannot open the instruction data for reading");
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (blank(line)) continue;
      const std::string where = path + ":" + std::to_string(number);
      const std::vector<ChatMessage> messages = instruction_messages(line, where);
      std::vector<ChatPiece> pieces;
      try {
        pieces = render_chat_pieces(format, messages);
      } catch (const Error& e) {
        throw Error(where, e.problem());  // the chat's rule, at the record that breaks it
      }
      TrainedTokens tokens = encode_chat_pieces(tokenizer, pieces);
      out.push_back({std::move(tokens.ids), std::move(tokens.trained)});
    }
    SPW_CHECK(in.eof(), path, "could not be read to its end");
  }
  SPW_CHECK(!out.empty(), paths.empty() ? std::string("instruction data") : paths.front(), "holds no records");
  return out;
}

bool uses_instruction_data(const DataConfig& data) {
  if (data.format == DataFormat::text) return false;
  if (data.format == DataFormat::automatic) {
    if (data.paths.empty()) return false;
    for (const std::string& p : data.paths) {
      if (!is_instruction_file(p)) return false;
    }
    return true;
  }
  SPW_CHECK(!data.paths.empty(), "--data", "--data-format instruction needs JSONL files of instruction records");
  for (const std::string& p : expand_text_paths(data.paths)) {
    SPW_CHECK(is_instruction_file(p), p,
              "is not instruction data: a .jsonl file whose first record has \"messages\" or \"instruction\"");
  }
  return true;
}

InstructionSet prepare_instruction_set(const DataConfig& data, const Tokenizer& tokenizer) {
  std::vector<InstructionExample> all = read_instruction_files(expand_text_paths(data.paths), tokenizer);
  InstructionSet set;
  for (const InstructionExample& e : all) {
    for (int32_t id : e.ids) set.vocab_needed = std::max(set.vocab_needed, id + 1);
  }
  std::vector<uint64_t> held_out;
  if (data.validation_fraction > 0) {
    SPW_CHECK(all.size() >= 2, data.paths.front(), "holds one record; holding records out for validation needs at ",
              "least two (--validation-fraction 0 turns validation off)");
    held_out = pick_validation_documents(all.size(), data.validation_fraction, data.seed);
  }
  size_t next = 0;
  for (uint64_t i = 0; i < all.size(); ++i) {
    const bool validation = next < held_out.size() && held_out[next] == i;
    if (validation) ++next;
    (validation ? set.validation : set.train).push_back(std::move(all[i]));
  }
  return set;
}

}  // namespace spillway::train
