// Hugging Face tokenizer.json (BPE): the file, then encoding and decoding a
// few strings with what it built, round trip included.
#include <vector>

#include "fuzz/fuzz_input.h"
#include "model/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  fuzz::expect_only_errors([&] {
    const BpeTokenizer tokenizer = parse_tokenizer_json(std::string(fuzz::as_text(data, size)), "tokenizer.json");
    for (const char* text : {"Hello, world!", " 12345  tabs\tand\nlines", "<s>caf\xc3\xa9 \xe2\x82\xac"}) {
      const std::vector<int32_t> ids = tokenizer.encode(text, true);
      tokenizer.decode(ids);
    }
  });
  return 0;
}
