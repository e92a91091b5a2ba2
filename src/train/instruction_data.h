// Instruction-tuning data: JSON Lines whose records are conversations, as
// Hugging Face TRL's SFTTrainer and Axolotl read them, rendered through the
// model's chat template (model/chat_pieces.h) into examples whose loss
// counts the assistant's tokens only.
//
// A record is one of
//   {"messages": [{"role": "system"|"user"|"assistant"|..., "content": "..."}, ...]}
//   {"instruction": "...", "input": "..." (optional), "output": "..."}   (Alpaca)
// An Alpaca record is the conversation user: instruction, then "\n\n" and
// the input when there is one; assistant: output. Other keys are ignored.
// A record with no assistant message, or with no content, or any line
// that is not such an object, is an Error("<file>:<line>", what is wrong);
// blank lines are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/chat_pieces.h"
#include "model/tokenizer.h"
#include "train/run_config.h"

namespace spillway::train {

// One conversation's tokens; trained[i] marks the tokens the loss counts
// (it predicts token i from those before it).
struct InstructionExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
};

// Whether `path` holds instruction records: its name ends in ".jsonl" and
// its first non-blank line is an object with a "messages" or an
// "instruction" key (what the trainer's automatic data format asks).
bool is_instruction_file(const std::string& path);

// The conversation of one record; `where` ("file:line") names it in errors.
std::vector<ChatMessage> instruction_messages(const std::string& line, const std::string& where);

// Every record of the files, in order, rendered and encoded.
std::vector<InstructionExample> read_instruction_files(const std::vector<std::string>& paths,
                                                       const Tokenizer& tokenizer);

// Whether a run's data is instruction records: as `format` says, or for
// auto, whether there are paths and every one is an instruction file; Error
// naming the file when instruction data is asked for and one is not.
bool uses_instruction_data(const DataConfig& data);

struct InstructionSet {
  std::vector<InstructionExample> train, validation;
  int32_t vocab_needed = 0;  // the largest id + 1
};

// The records of data.paths, whole examples held out for validation by
// data.validation_fraction (of the examples) with data.seed, as text
// documents are (text_to_tokens.h).
InstructionSet prepare_instruction_set(const DataConfig& data, const Tokenizer& tokenizer);

}  // namespace spillway::train
