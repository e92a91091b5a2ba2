// safetensors files: the header's numbers checked against the file, then
// every floating-point tensor converted, which reads each byte the header
// promised.
#include <vector>

#include "fuzz/fuzz_input.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  const std::string path = fuzz::write_scratch("model.safetensors", fuzz::as_text(data, size));
  fuzz::expect_only_errors([&] {
    SafetensorsFile file(path);
    for (const SafetensorsTensor& t : file.tensors()) {
      std::vector<float> out(static_cast<size_t>(t.shape.numel()));
      fuzz::expect_only_errors([&] { file.read_tensor_as_f32(t.name, t.shape, out); });
    }
  });
  return 0;
}
