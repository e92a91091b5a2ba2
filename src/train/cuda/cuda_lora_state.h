// The GPU LoRA engine's state, all on the device (train/lora_plan.h lays it
// out): the frozen base in bf16, with QLoRA the targeted projections as NF4
// codes and scales instead, dequantized one at a time into a bf16 scratch
// just before each matmul that reads one (forward, and the backward's
// product for the input's gradient); and the adapters' bf16 working copy,
// the rest of their fp32 masters (ops/master_split.h), their fp32 gradient
// sums and AdamW's fp32 moments. The base has no master, no moments and no
// gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "device/communicator.h"
#include "device/cuda/pinned_host.h"
#include "device/device.h"
#include "exec/executor.h"
#include "model/qlora.h"
#include "ops/nf4.h"
#include "train/lora_plan.h"
#include "train/lora_state.h"
#include "train/optimizer.h"
#include "train/step_plan.h"

namespace spillway::train {

class CudaLoraState {
 public:
  // Takes the device memory the layouts say and copies `weights` (the base
  // as it trains: with QLoRA, `quantized`'s round trip for the targeted
  // projections, whose NF4 codes and scales go up instead) and `lora`'s
  // adapters and moments up.
  CudaLoraState(const model::LlamaWeights& weights, const model::QuantizedBase& quantized, const LoraState& lora,
                const LoraBaseLayout& base, const LoraAdapterLayout& adapters, Device& device);
  ~CudaLoraState();
  CudaLoraState(const CudaLoraState&) = delete;
  CudaLoraState& operator=(const CudaLoraState&) = delete;

  // Binds a step's frozen weights (NF4 ones to the scratch), its adapters,
  // their scaling and, `with_grads`, their gradient sums.
  void bind(exec::StepProgram& program, const LlamaStep& step, bool with_grads) const;
  // For a step's plain executor: before each node of `step` that reads an
  // NF4 weight, that weight dequantized into the scratch on the compute
  // stream. Empty without NF4.
  std::function<void(size_t node, bool first)> dequantizer(const LlamaStep& step) const;

  // The gradient sums' sum of squares (every adapter at once, in a fixed
  // order), once the compute stream has made them.
  double grad_sum_of_squares();
  // The gradient sums summed over `group`'s ranks, in place.
  void sum_grads_over(Communicator& group, Stream& comm);
  // One AdamW update of every adapter from its gradient sum times
  // `grad_scale` (`adamw`'s step count advanced already); returns once done.
  void update(const AdamW& adamw, double lr, double grad_scale);
  // The adapters' fp32 masters and moments into `to`.
  void download(LoraState& to);

  uint64_t adapter_elements() const { return adapter_layout_.elements; }

 private:
  void upload(void* device, const void* host, uint64_t bytes);
  void download_bytes(void* host, const void* device, uint64_t bytes);

  Device& device_;
  LoraBaseLayout base_layout_;
  LoraAdapterLayout adapter_layout_;
  PinnedBuffer staging_;
  std::vector<void*> owned_;
  bf16* base_ = nullptr;     // the bf16 frozen weights
  uint8_t* nf4_ = nullptr;   // the NF4 codes and scales
  bf16* scratch_ = nullptr;  // the NF4 weight a node reads, dequantized
  std::vector<ops::Nf4DeviceTensor> nf4_tensors_;  // by checkpoint tensor (numel 0: not NF4)
  bf16* working_ = nullptr;
  uint16_t* remainder_ = nullptr;
  float *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  bf16* scaling_ = nullptr;  // (alpha / r) I, [r, r]
  double* squares_ = nullptr;  // the gradient norm's sum, and its workspace after it
  void* squares_workspace_ = nullptr;
};

}  // namespace spillway::train
