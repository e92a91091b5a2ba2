// The CPU backend's collectives: Gloo over TCP, each rank connected to
// every other through the rendezvous store. Each call is queued on the
// stream it is given and runs there, so a collective overlaps the work of
// other streams and joins them through events, as a GPU's would.
#pragma once

#include <memory>
#include <string>

#include "device/communicator.h"

namespace spillway {

// `interface_host`: the address this rank listens on for its peers
// ("127.0.0.1" for ranks on one host; the host's own name across hosts).
// Blocks until every rank has arrived, for at most the store's timeout,
// which also bounds every collective: a peer that dies ends the others'
// calls with an Error naming the operation.
std::unique_ptr<Communicator> make_gloo_communicator(int rank, int size, RendezvousStore& store,
                                                     const std::string& interface_host);

}  // namespace spillway
