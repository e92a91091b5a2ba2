// SentencePiece tokenizer.model (a protobuf): loading it, then encoding and
// decoding with it.
#include <vector>

#include "fuzz/fuzz_input.h"
#include "model/sentencepiece_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  fuzz::expect_only_errors([&] {
    const SentencePieceTokenizer tokenizer =
        SentencePieceTokenizer::from_serialized(std::string(fuzz::as_text(data, size)), "tokenizer.model");
    for (const char* text : {"Hello, world!", "<s> caf\xc3\xa9 12345\n"}) {
      const std::vector<int32_t> ids = tokenizer.encode(text, true);
      tokenizer.decode(ids);
    }
  });
  return 0;
}
