// Stream capture into a replayable CUDA graph, and the clean-up when a call
// inside refuses capture: the capture ended and dropped, the error cleared,
// so the caller can go on running the same work eagerly.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace spillway {

// What `enqueue` puts on `stream`, as an instantiated graph in `*replay`;
// or false, `*replay` null and `*why` the error, when it could not be
// captured (nothing of it ran).
bool capture_graph(cudaStream_t stream, const std::function<void()>& enqueue, cudaGraphExec_t* replay,
                   std::string* why);

}  // namespace spillway
