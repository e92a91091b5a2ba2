// GGUF files: the header, metadata and tensor infos, every tensor
// dequantized, and what spillway reads from the metadata (the LLaMA config
// and the tokenizer).
#include <vector>

#include "fuzz/fuzz_input.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  const std::string path = fuzz::write_scratch("model.gguf", fuzz::as_text(data, size));
  fuzz::expect_only_errors([&] {
    GgufFile file(path);
    for (const GgufTensorInfo& t : file.tensors()) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      file.read_f32(t, out);
    }
    fuzz::expect_only_errors([&] { model::gguf_llama_config(file); });
    fuzz::expect_only_errors([&] {
      const auto tokenizer = load_gguf_tokenizer(file);
      const std::vector<int32_t> ids = tokenizer->encode("Hello, world! 123", true);
      tokenizer->decode(ids);
    });
  });
  return 0;
}
