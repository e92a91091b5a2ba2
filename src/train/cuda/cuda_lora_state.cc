#include "train/cuda/cuda_lora_state.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_stream.h"
#include "ops/adamw.h"
#include "ops/grad_norm.h"
#include "ops/master_split.h"

namespace spillway::train {

namespace {

// Host <-> device copies go through a pinned buffer of this size, piece by piece.
constexpr uint64_t kStagingBytes = 64ull << 20;

}  // namespace

CudaLoraState::CudaLoraState(const model::LlamaWeights& weights, const model::QuantizedBase& quantized,
                             const LoraState& lora, const LoraBaseLayout& base, const LoraAdapterLayout& adapters,
                             Device& device)
    : device_(device), base_layout_(base), adapter_layout_(adapters), staging_(kStagingBytes) {
  MemorySpace& mem = device_.device_memory();
  auto take = [&](uint64_t bytes, const char* what) {
    if (bytes == 0) return static_cast<void*>(nullptr);
    owned_.push_back(mem.allocate(bytes, what));
    return owned_.back();
  };
  base_ = static_cast<bf16*>(take(base.bf16_bytes, "LoRA's frozen base (bf16)"));
  nf4_ = static_cast<uint8_t*>(take(base.nf4_bytes, "QLoRA's base (NF4 codes and scales)"));
  scratch_ = static_cast<bf16*>(take(base.scratch_bytes, "QLoRA's dequantized weight"));
  const uint64_t n = adapters.elements;
  working_ = static_cast<bf16*>(take(n * 2, "LoRA adapters (bf16)"));
  remainder_ = static_cast<uint16_t*>(take(n * 2, "LoRA adapters' masters (low half)"));
  grads_ = static_cast<float*>(take(n * 4, "LoRA adapters' gradient sums"));
  m_ = static_cast<float*>(take(n * 4, "LoRA adapters' first moments"));
  v_ = static_cast<float*>(take(n * 4, "LoRA adapters' second moments"));
  const auto r = static_cast<uint64_t>(lora.adapters.lora().rank);
  scaling_ = static_cast<bf16*>(take(r * r * 2, "LoRA scaling"));
  squares_ = static_cast<double*>(take(sizeof(double) + ops::sum_of_squares_workspace_bytes(), "gradient norm"));
  squares_workspace_ = squares_ + 1;

  // The base: bf16 as the GPU engines round a master (ops/master_split.h),
  // so that an NF4 weight dequantized on the device (rounded alike) gives
  // what its round trip uploaded here would.
  const auto& tensors = weights.tensors();
  SPW_CHECK(tensors.size() == base.tensors.size(), "GPU LoRA engine", "the weights hold ", tensors.size(),
            " tensors, the layout ", base.tensors.size());
  size_t q = 0;
  nf4_tensors_.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const LoraBaseLayout::Place& p = base.tensors[i];
    if (!p.nf4) {
      std::vector<bf16> rounded(tensors[i].data.size());
      const float* from = tensors[i].data.data();
      const auto count = static_cast<int64_t>(rounded.size());
#pragma omp parallel for schedule(static)  // an 8B base is 8e9 values
      for (int64_t j = 0; j < count; ++j) {
        uint32_t bits = 0;
        std::memcpy(&bits, from + j, 4);
        rounded[static_cast<size_t>(j)].bits = ops::split_master_bits(bits).working;
      }
      upload(reinterpret_cast<char*>(base_) + p.offset, rounded.data(), rounded.size() * 2);
      continue;
    }
    SPW_CHECK(q < quantized.tensors.size() && quantized.names[q] == tensors[i].name, tensors[i].name,
              "is stored NF4 by the layout but not by the quantized base");
    const ops::Nf4Tensor& t = quantized.tensors[q++];
    ops::Nf4DeviceTensor& d = nf4_tensors_[i];
    d.numel = t.numel;
    d.block = t.block;
    d.packed = nf4_ + p.packed;
    upload(nf4_ + p.packed, t.packed.data(), t.packed.size());
    if (t.double_quantized()) {
      d.qabsmax = nf4_ + p.scales;
      d.absmax2 = reinterpret_cast<const float*>(nf4_ + p.scales2);
      d.offset = t.offset;
      upload(nf4_ + p.scales, t.qabsmax.data(), t.qabsmax.size());
      upload(nf4_ + p.scales2, t.absmax2.data(), t.absmax2.size() * sizeof(float));
    } else {
      d.absmax = reinterpret_cast<const float*>(nf4_ + p.scales);
      upload(nf4_ + p.scales, t.absmax.data(), t.absmax.size() * sizeof(float));
    }
  }
  SPW_CHECK(q == quantized.tensors.size(), "GPU LoRA engine", "the quantized base holds ", quantized.tensors.size(),
            " tensors, the layout ", q);

  // The adapters: the padding between them stays zero (a zero gradient
  // leaves a zero weight and zero moments zero), so every array is one
  // tensor to the norm and to AdamW.
  cudaStream_t stream = as_cuda_stream(device_.stream(StreamKind::compute)).handle();
  for (void* p : {static_cast<void*>(working_), static_cast<void*>(remainder_)}) {
    SPW_CUDA(cudaMemsetAsync(p, 0, n * 2, stream));
  }
  for (float* p : {grads_, m_, v_}) SPW_CUDA(cudaMemsetAsync(p, 0, n * 4, stream));
  SPW_CUDA(cudaStreamSynchronize(stream));
  const auto& a = lora.adapters.tensors();
  for (size_t i = 0; i < a.size(); ++i) {
    const size_t count = a[i].data.size();
    std::vector<bf16> working(count);
    std::vector<uint16_t> remainder(count);
    ops::split_master(a[i].data.data(), working.data(), remainder.data(), static_cast<int64_t>(count));
    const uint64_t at = adapters.offsets[i];
    upload(working_ + at, working.data(), count * 2);
    upload(remainder_ + at, remainder.data(), count * 2);
    upload(m_ + at, lora.m.tensors()[i].data.data(), count * 4);
    upload(v_ + at, lora.v.tensors()[i].data.data(), count * 4);
  }
  std::vector<bf16> scaling(r * r, bf16{});
  for (uint64_t i = 0; i < r; ++i) scaling[i * r + i] = to_bf16(static_cast<float>(lora.adapters.lora().scaling()));
  upload(scaling_, scaling.data(), scaling.size() * 2);
}

CudaLoraState::~CudaLoraState() {
  try {
    device_.synchronize();
  } catch (const std::exception&) {
    // An error of the last step's: its report went out with it.
  }
  for (void* p : owned_) device_.device_memory().free(p);
}

void CudaLoraState::upload(void* device, const void* host, uint64_t bytes) {
  Stream& stream = device_.stream(StreamKind::compute);
  for (uint64_t at = 0; at < bytes; at += staging_.bytes()) {
    const uint64_t len = std::min(staging_.bytes(), bytes - at);
    std::memcpy(staging_.as<char>(), static_cast<const char*>(host) + at, len);
    device_.copy_async(static_cast<char*>(device) + at, staging_.as<char>(), len, stream);
    stream.synchronize();  // the staging is reused for the next piece
  }
}

void CudaLoraState::download_bytes(void* host, const void* device, uint64_t bytes) {
  Stream& stream = device_.stream(StreamKind::compute);
  for (uint64_t at = 0; at < bytes; at += staging_.bytes()) {
    const uint64_t len = std::min(staging_.bytes(), bytes - at);
    device_.copy_async(staging_.as<char>(), static_cast<const char*>(device) + at, len, stream);
    stream.synchronize();
    std::memcpy(static_cast<char*>(host) + at, staging_.as<char>(), len);
  }
}

void CudaLoraState::bind(exec::StepProgram& program, const LlamaStep& step, bool with_grads) const {
  const model::LlamaGraph& m = step.model;
  for (size_t j = 0; j < m.parameters.size(); ++j) {
    const auto t = static_cast<size_t>(m.parameter_parts[j].front());
    const LoraBaseLayout::Place& p = base_layout_.tensors.at(t);
    program.bind(m.parameters[j], p.nf4 ? static_cast<void*>(scratch_) : reinterpret_cast<char*>(base_) + p.offset);
  }
  SPW_CHECK(m.adapters.size() == adapter_layout_.offsets.size(), "GPU LoRA engine", "the step has ",
            m.adapters.size(), " adapters, the state ", adapter_layout_.offsets.size());
  for (size_t i = 0; i < m.adapters.size(); ++i) {
    const uint64_t at = adapter_layout_.offsets[i];
    program.bind(m.adapters[i], static_cast<void*>(working_ + at));
    if (!with_grads) continue;
    const graph::Value g = step.step.grads[m.adapters[i]];
    SPW_CHECK(step.step.graph.value(g).dtype == DType::f32, "GPU LoRA engine", "an adapter's gradient sum is ",
              dtype_name(step.step.graph.value(g).dtype), ", not f32");
    program.bind(g, static_cast<void*>(grads_ + at));
  }
  program.bind(m.lora_scaling, static_cast<void*>(scaling_));
}

std::function<void(size_t, bool)> CudaLoraState::dequantizer(const LlamaStep& step) const {
  if (!nf4_) return {};
  auto reads = std::make_shared<const std::vector<int>>(nf4_reads_by_node(step, base_layout_));
  cudaStream_t stream = as_cuda_stream(device_.stream(StreamKind::compute)).handle();
  const std::vector<ops::Nf4DeviceTensor>* tensors = &nf4_tensors_;
  bf16* scratch = scratch_;
  return [reads, tensors, scratch, stream](size_t node, bool) {
    const int t = (*reads)[node];
    if (t >= 0) ops::nf4_dequantize_bf16_cuda((*tensors)[static_cast<size_t>(t)], scratch, stream);
  };
}

double CudaLoraState::grad_sum_of_squares() {
  Stream& compute = device_.stream(StreamKind::compute);
  cudaStream_t stream = as_cuda_stream(compute).handle();
  ops::sum_of_squares_cuda(grads_, static_cast<int64_t>(adapter_layout_.elements), squares_, false,
                           squares_workspace_, stream);
  double sum = 0;
  download_bytes(&sum, squares_, sizeof sum);
  return sum;
}

void CudaLoraState::sum_grads_over(Communicator& group, Stream& comm) {
  device_.stream(StreamKind::compute).synchronize();  // the sums are final
  group.all_reduce_sum(grads_, adapter_layout_.elements, DType::f32, comm);
  group.wait(comm);
}

void CudaLoraState::update(const AdamW& adamw, double lr, double grad_scale) {
  Stream& compute = device_.stream(StreamKind::compute);
  // Every adapter is a matrix: all decay, as AdamW decays matrices.
  ops::adamw_update_split_cuda(working_, remainder_, grads_, m_, v_, static_cast<int64_t>(adapter_layout_.elements),
                               adamw.hyper(lr, grad_scale, /*matrix=*/true), as_cuda_stream(compute).handle());
  compute.synchronize();
}

void CudaLoraState::download(LoraState& to) {
  auto& a = to.adapters.tensors();
  for (size_t i = 0; i < a.size(); ++i) {
    const size_t count = a[i].data.size();
    const uint64_t at = adapter_layout_.offsets[i];
    std::vector<bf16> working(count);
    std::vector<uint16_t> remainder(count);
    download_bytes(working.data(), working_ + at, count * 2);
    download_bytes(remainder.data(), remainder_ + at, count * 2);
    ops::join_master(working.data(), remainder.data(), a[i].data.data(), static_cast<int64_t>(count));
    download_bytes(to.m.tensors()[i].data.data(), m_ + at, count * 4);
    download_bytes(to.v.tensors()[i].data.data(), v_ + at, count * 4);
  }
}

}  // namespace spillway::train
