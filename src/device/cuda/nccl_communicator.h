// The GPU backend's collectives: NCCL, one rank per GPU, the unique id
// passed through the rendezvous store. Each call is enqueued on the CUDA
// stream it is given (the device's comm stream).
#pragma once

#include <memory>

#include "device/communicator.h"

namespace spillway {

// Blocks until every rank has joined, for at most the store's timeout;
// Error naming the rank and NCCL's reason when it cannot.
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, RendezvousStore& store, int device_ordinal);

}  // namespace spillway
