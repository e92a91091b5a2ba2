#include "device/cuda/graph_capture.h"

#include "base/status.h"
#include "device/cuda/cuda_check.h"

namespace spillway {

bool capture_graph(cudaStream_t stream, const std::function<void()>& enqueue, cudaGraphExec_t* replay,
                   std::string* why) {
  cudaGraph_t graph = nullptr;
  *replay = nullptr;
  try {
    SPW_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    SPW_CUDA(cudaStreamEndCapture(stream, &graph));
    SPW_CUDA(cudaGraphInstantiate(replay, graph, 0));
    SPW_CUDA(cudaGraphDestroy(graph));
    return true;
  } catch (const Error& e) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(stream, &partial);
      graph = graph ? graph : partial;
    }
    if (graph) (void)cudaGraphDestroy(graph);
    *replay = nullptr;
    (void)cudaGetLastError();
    *why = e.what();
    return false;
  }
}

}  // namespace spillway
