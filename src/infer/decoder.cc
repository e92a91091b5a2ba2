#include "infer/decoder.h"

#include "base/status.h"
#include "infer/llama_decoder.h"

#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_device.h"
#include "infer/cuda/cuda_decoder.h"
#endif

namespace spillway::infer {

bool device_is_cuda(const std::string& device) {
  SPW_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device", "unknown device '", device,
            "' (", kDecoderDevices, ")");
#ifdef SPILLWAY_HAS_CUDA
  return device == "cuda" || (device == "auto" && cuda_device_count() > 0);
#else
  SPW_CHECK(device != "cuda", "--device", "this spillway was built without CUDA (SPILLWAY_CUDA=OFF)");
  return false;
#endif
}

std::unique_ptr<Decoder> make_decoder(const model::LlamaWeights& weights, int64_t max_len,
                                      const std::string& device) {
#ifdef SPILLWAY_HAS_CUDA
  if (device_is_cuda(device)) return make_cuda_decoder(weights, max_len);
#else
  device_is_cuda(device);  // checks the name
#endif
  return std::make_unique<LlamaDecoder>(weights, max_len);
}

}  // namespace spillway::infer
