#include "train/cuda/training_state.h"

#include <algorithm>
#include <cstring>

#include "base/host_memory.h"
#include "base/status.h"
#include "model/llama_graph.h"
#include "ops/master_split.h"
#include "train/adamw_state.h"

namespace spillway::train {

namespace {

constexpr uint64_t kStackAlign = kStateAlign;

// Pinned room for one piece of a tensor's working copy, master rest and one
// moment on their way between the caller's arrays and the device.
struct PieceStaging {
  int64_t piece;
  PinnedBuffer buffer;
  bf16* working;
  uint16_t* remainder;
  char* moment;
  explicit PieceStaging(int64_t n)
      : piece(n),
        buffer(static_cast<uint64_t>(n) * 8),
        working(buffer.as<bf16>()),
        remainder(reinterpret_cast<uint16_t*>(working + piece)),
        moment(reinterpret_cast<char*>(remainder + piece)) {}
};

// Calls body(tensor, index, offset, length, staging) over every tensor in
// pieces of at most one optimizer chunk, through one staging buffer.
template <typename Body>
void for_each_staged_piece(const std::vector<CudaTrainingState::Tensor>& tensors, int64_t largest, Body body) {
  const int64_t piece = OptimizerStaging(largest).chunk;
  const PieceStaging staging(piece);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CudaTrainingState::Tensor& t = tensors[i];
    for (int64_t off = 0; off < t.n; off += piece) body(t, i, off, std::min(piece, t.n - off), staging);
  }
}

// A moment's fp32 values as the state keeps them (fp32, or rounded to
// bf16), and back.
void narrow_moment(const float* from, void* to, int64_t n, bool bf16_moments) {
  if (!bf16_moments) {
    std::memcpy(to, from, static_cast<size_t>(n) * 4);
    return;
  }
  auto* narrow = static_cast<bf16*>(to);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t j = 0; j < n; ++j) narrow[j] = to_bf16(from[j]);
}

void widen_moment(const void* from, float* to, int64_t n, bool bf16_moments) {
  if (!bf16_moments) {
    std::memcpy(to, from, static_cast<size_t>(n) * 4);
    return;
  }
  const auto* narrow = static_cast<const bf16*>(from);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t j = 0; j < n; ++j) to[j] = to_float(narrow[j]);
}

}  // namespace

// The staging of the state's reads, kept from one read to the next.
struct CudaTrainingState::ReadStaging : PieceStaging {
  using PieceStaging::PieceStaging;
};

CudaTrainingState::CudaTrainingState(model::LlamaWeights& weights, AdamW& optimizer,
                                     const std::vector<std::vector<int>>& parts, const plan::TrainingPlan& plan,
                                     bool bf16_moments, Device& device, Sharding sharding)
    : weights_(weights),
      optimizer_(optimizer),
      device_(device),
      shard_over_(sharding.over && sharding.over->size() > 1 ? sharding.over : nullptr),
      sharding_(std::move(sharding)),
      optimizer_on_device_(plan.optimizer_resident),
      weights_on_device_(plan.weights_resident),
      bf16_moments_(bf16_moments) {
  const auto& named = weights_.tensors();
  SPW_CHECK(parts.size() == plan.grad_resident.size(), "training state", "the plan places ",
            plan.grad_resident.size(), " gradient sums for ", parts.size(), " parameters");
  if (!shard_over_) sharding_.gradients = sharding_.weights = false;
  // fp32 moments at home are the caller's arrays, made zero for a fresh
  // run; elsewhere the state's own arrays start at zero.
  const bool moments_are_callers = !optimizer_on_device_ && !bf16_moments_;
  if (moments_are_callers && optimizer_.m.tensors().empty()) {
    optimizer_.m = model::LlamaWeights::zeros(weights_.config());
    optimizer_.v = model::LlamaWeights::zeros(weights_.config());
  }
  std::vector<int64_t> numel;
  tensors_.resize(named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    numel.push_back(named[i].shape.numel());
    tensors_[i].n = numel.back();
    tensors_[i].decay = named[i].shape.rank() >= 2;
    tensors_[i].master = weights_.tensors()[i].data.data();
    largest_ = std::max(largest_, numel.back());
  }

  // A tensor the graph does not train here (another pipeline stage's, held
  // empty) has no gradient sum anywhere: nothing of it lies at home.
  std::vector<bool> grad_on_device(named.size(), false);
  for (size_t i = 0; i < named.size(); ++i) grad_on_device[i] = numel[i] == 0;
  for (size_t j = 0; j < parts.size(); ++j) {
    const bool decay = tensors_[static_cast<size_t>(parts[j].front())].decay;
    for (int t : parts[j]) {
      SPW_CHECK(tensors_[static_cast<size_t>(t)].decay == decay, named[static_cast<size_t>(t)].name,
                "is stacked with tensors of the other weight-decay setting");
      grad_on_device[static_cast<size_t>(t)] = plan.grad_resident[j];
    }
  }
  SPW_CHECK(!shard_over_ || sharding_.region_key.size() == parts.size(), "training state",
            "sharding names regions of ", sharding_.region_key.size(), " parameters, not ", parts.size());
  const int ranks = shard_over_ ? shard_over_->size() : 1;
  std::vector<bool> decayed_tensor;
  for (const Tensor& t : tensors_) decayed_tensor.push_back(t.decay);
  layout_ = lay_out_state(parts, numel, decayed_tensor, shard_over_ ? sharding_.region_key : std::vector<int>{}, ranks,
                          shard_over_ ? shard_over_->rank() : 0, kStackAlign);
  const std::vector<uint64_t>& at = layout_.tensor_at;
  arrays_.elements = layout_.elements;
  arrays_.decayed_elements = layout_.decayed_elements;
  arrays_.share_elements = layout_.shards.share_elements();
  arrays_.decayed_share = layout_.shards.share_below(arrays_.decayed_elements);
  // The gradient sums split by where they live, in the layout's order.
  std::vector<size_t> order(parts.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return layout_.stack_at[a] < layout_.stack_at[b]; });
  std::vector<std::vector<int>> device_grads, home_grads;
  for (size_t j : order) {
    (grad_on_device[static_cast<size_t>(parts[j].front())] ? device_grads : home_grads).push_back(parts[j]);
  }
  SPW_CHECK(!shard_over_ || (optimizer_on_device_ && weights_on_device_ && home_grads.empty()), "--shard",
            "shards the training state only where the plan keeps all of it on the device");
  const std::vector<uint64_t> device_grad_at = model::stacked_offsets(device_grads, numel, kStackAlign);
  const std::vector<uint64_t> home_grad_at = model::stacked_offsets(home_grads, numel, kStackAlign);

  MemorySpace& mem = device_.device_memory();
  Stream& stream = device_.stream(StreamKind::compute);
  // On the device, zeroed (the gaps stay zero); at home, pinned.
  auto place = [&](uint64_t bytes, bool on_device, const char* what) -> char* {
    if (bytes == 0) return nullptr;
    if (on_device) {
      void* p = mem.allocate(bytes, what);
      device_owned_.push_back(p);
      device_.zero_async(p, bytes, stream);
      return static_cast<char*>(p);
    }
    host_owned_.push_back(std::make_unique<PinnedBuffer>(bytes));
    return host_owned_.back()->as<char>();
  };
  const uint64_t n = arrays_.elements, share = arrays_.share_elements;
  const uint64_t moment_bytes = adamw_moment_bytes(bf16_moments_) / 2;
  // Where this rank's share starts inside a whole array: ZeRO-1's one region.
  const auto& regions = layout_.shards.regions();
  const bool one_region = regions.size() == 1;
  const uint64_t share_in_whole = one_region ? regions[0].piece * static_cast<uint64_t>(layout_.shards.rank()) : 0;
  if (!sharding_.weights) arrays_.working = reinterpret_cast<bf16*>(place(n * 2, weights_on_device_, "weights (bf16)"));
  arrays_.working_share = arrays_.working && one_region
                              ? arrays_.working + share_in_whole
                              : reinterpret_cast<bf16*>(place(share * 2, true, "weights (bf16), this rank's share"));
  arrays_.remainder = reinterpret_cast<uint16_t*>(place(share * 2, optimizer_on_device_, "fp32 master, low halves"));
  if (sharding_.gradients) {
    device_grad_bytes_ = share * 4;
    device_grads_ = reinterpret_cast<float*>(place(device_grad_bytes_, true, "gradients (fp32), this rank's share"));
    arrays_.grads_share = device_grads_;
    gather_scratch_ = place(static_cast<uint64_t>(OptimizerStaging(largest_).chunk) * 4, true, "checkpoint reads");
  } else {
    device_grad_bytes_ = (shard_over_ ? n : device_grad_at.back()) * 4;
    device_grads_ = reinterpret_cast<float*>(place(device_grad_bytes_, true, "gradients (fp32)"));
    arrays_.grads_share = device_grads_ + share_in_whole;
    gather_scratch_ = reinterpret_cast<char*>(device_grads_);
  }
  float* home_grads_block = reinterpret_cast<float*>(place(home_grad_at.back() * 4, false, "gradients at home"));
  char *m = nullptr, *v = nullptr;
  if (optimizer_on_device_ || bf16_moments_) {
    m = place(share * moment_bytes, optimizer_on_device_, "AdamW m");
    v = place(share * moment_bytes, optimizer_on_device_, "AdamW v");
  }
  if (optimizer_on_device_) {
    arrays_.grads = sharding_.gradients ? nullptr : device_grads_;
    arrays_.m = m;
    arrays_.v = v;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    t.at = at[i];
    t.working = arrays_.working ? arrays_.working + at[i] : nullptr;
    t.grad_on_device = grad_on_device[i];
    if (!sharding_.gradients) {
      t.grad = grad_on_device[i] ? device_grads_ + device_grad_at[i] : home_grads_block + home_grad_at[i];
    }
    if (shard_over_) continue;
    t.remainder = arrays_.remainder + at[i];
    if (m) {
      t.m = m + at[i] * moment_bytes;
      t.v = v + at[i] * moment_bytes;
    } else {
      // fp32 moments at home: the caller's arrays, pinned in place.
      pinned_in_place_.add(optimizer_.m.tensors()[i].data.data(), static_cast<uint64_t>(t.n) * 4);
      pinned_in_place_.add(optimizer_.v.tensors()[i].data.data(), static_cast<uint64_t>(t.n) * 4);
    }
  }
  if (!m) pinned_in_place_.pin();
  if (shard_over_) {
    upload_share();
  } else {
    upload();
  }
  // The state lives here now: the caller's copies would be a second one (for
  // LLaMA-3-8B, 32 GB of masters and 64 GB of moments in host memory).
  weights_.release_values();
  return_free_host_memory();
  for (Tensor& t : tensors_) t.master = nullptr;
  if (!moments_are_callers) {
    optimizer_.m = model::LlamaWeights();
    optimizer_.v = model::LlamaWeights();
  }
}

CudaTrainingState::~CudaTrainingState() {
  for (void* p : device_owned_) device_.device_memory().free(p);
}

// The caller's masters split into working copies and remainders; moments
// from the caller's fp32 ones (a resumed run), rounded where they are bf16,
// or left zero. Parts on the device go through pinned staging.
void CudaTrainingState::upload() {
  const bool have_moments = !optimizer_.m.tensors().empty();
  Stream& stream = device_.stream(StreamKind::compute);
  const uint64_t moment_bytes = adamw_moment_bytes(bf16_moments_) / 2;
  for_each_staged_piece(tensors_, largest_, [&](const Tensor& t, size_t i, int64_t off, int64_t len,
                                                const PieceStaging& staging) {
    const auto count = static_cast<size_t>(len);
    bf16* w = weights_on_device_ ? staging.working : t.working + off;
    uint16_t* r = optimizer_on_device_ ? staging.remainder : t.remainder + off;
    ops::split_master(t.master + off, w, r, len);
    if (weights_on_device_) device_.copy_async(t.working + off, staging.working, count * 2, stream);
    if (optimizer_on_device_) device_.copy_async(t.remainder + off, staging.remainder, count * 2, stream);
    for (int k = 0; k < 2; ++k) {
      void* moment = k == 0 ? t.m : t.v;
      if (!bf16_moments_ && !optimizer_on_device_) continue;  // the caller's own arrays
      char* to = static_cast<char*>(moment) + static_cast<size_t>(off) * moment_bytes;
      if (!have_moments) continue;  // stays zero
      const float* from = (k == 0 ? optimizer_.m : optimizer_.v).tensors()[i].data.data() + off;
      narrow_moment(from, optimizer_on_device_ ? staging.moment : to, len, bf16_moments_);
      if (optimizer_on_device_) {
        device_.copy_async(to, staging.moment, count * moment_bytes, stream);
        stream.synchronize();  // the moment staging is reused for v
      }
    }
    stream.synchronize();  // the staging is reused for the next piece
  });
  // bf16 moments at home that start from zero: pinned memory is not zeroed.
  if (bf16_moments_ && !optimizer_on_device_ && !have_moments) {
    for (const Tensor& t : tensors_) {
      std::memset(t.m, 0, static_cast<size_t>(t.n) * 2);
      std::memset(t.v, 0, static_cast<size_t>(t.n) * 2);
    }
  }
  stream.synchronize();
}

void CudaTrainingState::copy_moment(size_t i, int which, int64_t off, int64_t n, void* device, Towards towards,
                                    Stream& stream) const {
  const Tensor& t = tensors_[i];
  const uint64_t size = adamw_moment_bytes(bf16_moments_) / 2;
  const auto at = static_cast<uint64_t>(off) * size, bytes = static_cast<uint64_t>(n) * size;
  if (!t.m) {  // fp32 at home: the caller's array, pinned in place
    const size_t array = 2 * i + static_cast<size_t>(which);
    if (towards == Towards::device) {
      pinned_in_place_.copy_to_device(array, at, device, bytes, device_, stream);
    } else {
      pinned_in_place_.copy_from_device(array, at, device, bytes, device_, stream);
    }
    return;
  }
  char* home = static_cast<char*>(which == 0 ? t.m : t.v) + at;
  if (towards == Towards::device) {
    device_.copy_async(device, home, bytes, stream);
  } else {
    device_.copy_async(home, device, bytes, stream);
  }
}

void CudaTrainingState::sync_to_host() {
  const model::LlamaConfig& config = weights_.config();
  if (optimizer_.m.tensors().empty()) {
    optimizer_.m = model::LlamaWeights::zeros(config);
    optimizer_.v = model::LlamaWeights::zeros(config);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::vector<float>& master = weights_.tensors()[i].data;
    master.resize(static_cast<size_t>(tensors_[i].n));
    read(StatePart::master, i, master);
    read(StatePart::m, i, optimizer_.m.tensors()[i].data);
    read(StatePart::v, i, optimizer_.v.tensors()[i].data);
  }
}

void CudaTrainingState::read(StatePart part, size_t i, std::span<float> out) {
  SPW_CHECK(i < tensors_.size() && out.size() == static_cast<size_t>(tensors_[i].n), "training state",
            "a read of tensor ", i, " into ", out.size(), " values does not match the state");
  if (!staging_) staging_ = std::make_unique<ReadStaging>(OptimizerStaging(largest_).chunk);
  device_.synchronize();  // the step's updates are complete
  const bool callers_moments = !bf16_moments_ && !optimizer_on_device_;
  if (part != StatePart::master && callers_moments) {
    // fp32 moments at home: the caller's own arrays, whose page-straddling
    // ends the copies keep in shadows until written back.
    pinned_in_place_.write_back();
    const std::vector<float>& home = (part == StatePart::m ? optimizer_.m : optimizer_.v).tensors()[i].data;
    if (home.data() != out.data()) std::copy(home.begin(), home.end(), out.begin());
    return;
  }
  const Tensor& t = tensors_[i];
  const int64_t piece = staging_->piece;
  for (int64_t off = 0; off < t.n; off += piece) {
    const int64_t len = std::min(piece, t.n - off);
    if (part == StatePart::master) {
      read_master_piece(t, off, len, out.data() + off);
    } else {
      read_moment_piece(t, part == StatePart::m ? 0 : 1, off, len, out.data() + off);
    }
  }
  if (shard_over_ && gather_scratch_ == reinterpret_cast<char*>(device_grads_)) {
    // The shares were gathered through the gradient sums' block, whose gaps
    // must stay zero.
    Stream& comm = device_.stream(StreamKind::comm);
    device_.zero_async(device_grads_, std::min<uint64_t>(device_grad_bytes_, static_cast<uint64_t>(piece) * 4), comm);
    comm.synchronize();
  }
}

// With sharded state the pieces of the masters' rest and the moments (and
// of sharded working copies) come from every rank (gather_shares), through
// the gather scratch: the gradient sums' whole block where there is one
// (it holds nothing between optimizer steps: a step's first micro-batch
// writes it whole), else room of its own.
void CudaTrainingState::read_master_piece(const Tensor& t, int64_t off, int64_t len, float* out) {
  const ReadStaging& staging = *staging_;
  const auto count = static_cast<uint64_t>(len);
  Stream& stream = device_.stream(shard_over_ ? StreamKind::comm : StreamKind::compute);
  const bf16* w = t.working ? t.working + off : nullptr;
  if (!w) {
    gather_shares(arrays_.working_share, 2, DType::bf16, t.at + static_cast<uint64_t>(off), count, gather_scratch_,
                  stream);
    device_.copy_async(staging.working, gather_scratch_, count * 2, stream);
    shard_over_->wait(stream);  // the scratch is reused for the remainder
    w = staging.working;
  } else if (weights_on_device_) {
    device_.copy_async(staging.working, w, count * 2, stream);
    w = staging.working;
  }
  const uint16_t* r = t.remainder ? t.remainder + off : nullptr;
  if (shard_over_) {
    char* gathered = gather_scratch_;
    // The master's low halves travel as 16-bit values: bf16 is NCCL's word for them.
    gather_shares(arrays_.remainder, 2, DType::bf16, t.at + static_cast<uint64_t>(off), count, gathered, stream);
    device_.copy_async(staging.remainder, gathered, count * 2, stream);
    shard_over_->wait(stream);
    r = staging.remainder;
  } else {
    if (optimizer_on_device_) {
      device_.copy_async(staging.remainder, r, count * 2, stream);
      r = staging.remainder;
    }
    stream.synchronize();
  }
  ops::join_master(w, r, out, len);
}

void CudaTrainingState::read_moment_piece(const Tensor& t, int which, int64_t off, int64_t len, float* out) {
  const ReadStaging& staging = *staging_;
  const uint64_t moment_bytes = adamw_moment_bytes(bf16_moments_) / 2;
  const auto count = static_cast<uint64_t>(len);
  if (shard_over_) {
    Stream& comm = device_.stream(StreamKind::comm);
    const DType moment_type = bf16_moments_ ? DType::bf16 : DType::f32;
    char* gathered = gather_scratch_;
    gather_shares(which == 0 ? arrays_.m : arrays_.v, moment_bytes, moment_type, t.at + static_cast<uint64_t>(off),
                  count, gathered, comm);
    device_.copy_async(staging.moment, gathered, count * moment_bytes, comm);
    shard_over_->wait(comm);
    widen_moment(staging.moment, out, len, bf16_moments_);
    return;
  }
  const char* from = static_cast<const char*>(which == 0 ? t.m : t.v) + static_cast<uint64_t>(off) * moment_bytes;
  if (optimizer_on_device_) {
    Stream& stream = device_.stream(StreamKind::compute);
    device_.copy_async(staging.moment, from, count * moment_bytes, stream);
    stream.synchronize();
    from = staging.moment;
  }
  widen_moment(from, out, len, bf16_moments_);
}

// This rank's share of the masters' rest and moments, and of the working
// copies where those are sharded (else every working copy, and the share
// too where it lies apart from them).
void CudaTrainingState::upload_share() {
  const bool have_moments = !optimizer_.m.tensors().empty();
  Stream& stream = device_.stream(StreamKind::compute);
  const uint64_t moment_bytes = adamw_moment_bytes(bf16_moments_) / 2;
  const bool share_apart = arrays_.working == nullptr || layout_.shards.regions().size() > 1;
  for_each_staged_piece(tensors_, largest_, [&](const Tensor& t, size_t i, int64_t off, int64_t len,
                                                const PieceStaging& staging) {
    ops::split_master(t.master + off, staging.working, staging.remainder, len);
    if (t.working) device_.copy_async(t.working + off, staging.working, static_cast<uint64_t>(len) * 2, stream);
    layout_.shards.for_each_mine(t.at + static_cast<uint64_t>(off), static_cast<uint64_t>(len),
                          [&](uint64_t skip, uint64_t count, uint64_t local) {
      if (share_apart) {
        device_.copy_async(arrays_.working_share + local, staging.working + skip, count * 2, stream);
      }
      device_.copy_async(arrays_.remainder + local, staging.remainder + skip, count * 2, stream);
      for (int k = 0; have_moments && k < 2; ++k) {
        const float* from = (k == 0 ? optimizer_.m : optimizer_.v).tensors()[i].data.data() + off + skip;
        narrow_moment(from, staging.moment, static_cast<int64_t>(count), bf16_moments_);
        device_.copy_async(static_cast<char*>(k == 0 ? arrays_.m : arrays_.v) + local * moment_bytes,
                           staging.moment, count * moment_bytes, stream);
        stream.synchronize();  // the moment staging is reused for v
      }
    });
    stream.synchronize();  // the staging is reused for the next piece
  });
}

void CudaTrainingState::gather_shares(const void* share, uint64_t bytes, DType dtype, uint64_t first, uint64_t n,
                                      char* device, Stream& stream) {
  layout_.shards.for_each_owner(first, n, [&](int owner, uint64_t skip, uint64_t count, uint64_t at) {
    char* to = device + skip * bytes;
    if (owner == shard_over_->rank()) {
      device_.copy_async(to, static_cast<const char*>(share) + at * bytes, count * bytes, stream);
    }
    shard_over_->broadcast(to, count, dtype, owner, stream);
  });
}

}  // namespace spillway::train
