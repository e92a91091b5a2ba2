// AdamW over the GPU engine's training state (train/cuda/training_state.h),
// with the same kernels wherever the state lives: in place when it is on
// the device, every parameter in two launches (the weight-decayed stacks,
// then the rest); otherwise streamed through the GPU in chunks, three in
// flight (one loading on the host->device stream, one updating on the
// compute stream, one going home on the device->host stream), the working
// copy and the gradient sum coming up with the chunk where they live at home.
#pragma once

#include <memory>
#include <vector>

#include "device/device.h"
#include "train/adamw_state.h"
#include "train/cuda/training_state.h"
#include "train/optimizer.h"

namespace spillway::train {

class CudaAdamW {
 public:
  CudaAdamW(CudaTrainingState& state, Device& device);
  ~CudaAdamW();
  CudaAdamW(const CudaAdamW&) = delete;
  CudaAdamW& operator=(const CudaAdamW&) = delete;

  // One update with `adamw`'s hyperparameters (its step count already
  // advanced), from the gradient sums times `grad_scale`; returns once done.
  void update(const AdamW& adamw, double lr, double grad_scale);

 private:
  struct Slot {
    uint16_t* remainder = nullptr;
    float *m = nullptr, *v = nullptr, *grad = nullptr;
    bf16* working = nullptr;
    std::unique_ptr<Event> loaded, updated, free;
  };
  void update_in_place(const AdamW& adamw, double lr, double grad_scale);
  void update_streamed(const AdamW& adamw, double lr, double grad_scale);

  CudaTrainingState& state_;
  Device& device_;
  OptimizerStaging staging_;
  std::vector<Slot> slots_;  // streamed only
  std::vector<void*> owned_;
};

}  // namespace spillway::train
