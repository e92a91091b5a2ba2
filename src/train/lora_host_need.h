// What a LoRA or QLoRA run on a GPU holds in host memory, known from its
// shape before anything is made: `spillway plan` prints it, and a run
// refuses to start, with the numbers, where it does not fit the host
// budget, so a run that fits is never killed for the host's memory.
//
// With NF4 the base is quantized as it is made or read
// (model/qlora_stream.h): the host holds the NF4 base, the float32 tensors
// kept as loaded, and the float32 of the projections being made at once,
// never the whole model in float32. The GPU engine then holds what it
// uploads, one tensor's bf16 copy at a time.
#pragma once

#include <cstdint>
#include <string>

#include "model/llama_config.h"
#include "model/lora.h"

namespace spillway::train {

struct LoraHostNeed {
  uint64_t nf4 = 0;         // the NF4 base's codes and scales
  uint64_t kept = 0;        // float32 weights kept as loaded (all of them without NF4)
  uint64_t in_flight = 0;   // the larger of the float32 being quantized at once and one bf16 upload copy
  int64_t makers = 0;       // the projections being quantized at once
  uint64_t adapters = 0;    // the adapters and their two moments, float32
  uint64_t runtime = 0;     // CUDA's context, the libraries, the data
  uint64_t whole_fp32 = 0;  // the whole model in float32, for comparison
  uint64_t total() const { return nf4 + kept + in_flight + adapters + runtime; }
  // "nf4 base 35.86 GiB, float32 kept 7.83 GiB (...), ...; never the
  // whole model's 262.83 GiB in float32"
  std::string describe(model::LoraBase base) const;
};

// `makers`: the projections quantized at once (the threads drawing a
// random base; 1 reading one); `runtime`: what the process holds beside.
LoraHostNeed lora_host_need(const model::LlamaConfig& config, const model::LoraConfig& lora, model::LoraBase base,
                            int64_t makers, uint64_t runtime);

// Error naming --host-mem when `need` does not fit `budget`, saying what
// takes what; `budget_from` says where the budget came from.
void check_lora_host_fits(const LoraHostNeed& need, uint64_t budget, model::LoraBase base,
                          const std::string& budget_from);

}  // namespace spillway::train
