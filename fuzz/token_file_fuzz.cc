// Token files and their sidecar: the input's first byte is the sidecar's
// length, the sidecar follows, the rest is the data file; every token is
// then copied out.
#include <vector>

#include "fuzz/fuzz_input.h"
#include "train/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  if (size == 0) return 0;
  const size_t sidecar_size = std::min<size_t>(data[0], size - 1);
  const std::string_view input = fuzz::as_text(data + 1, size - 1);
  const std::string path = fuzz::write_scratch("tokens.bin", input.substr(sidecar_size));
  fuzz::write_scratch("tokens.bin.json", input.substr(0, sidecar_size));
  fuzz::expect_only_errors([&] {
    TokenFile tokens(path);
    std::vector<int32_t> out(static_cast<size_t>(tokens.size()));
    tokens.copy(0, out);
    if (tokens.size() > 0) tokens[tokens.size() - 1];
  });
  return 0;
}
