// Softmax cross-entropy over the vocabulary, fused: softmax is never stored.
//
// Contract: logits [rows, vocab]; targets [rows] (int32; a negative target,
// such as Hugging Face's -100, marks a row that does not count);
// lse [rows] (log-sum-exp of each row, written by forward for backward);
// loss: one element, the mean over counted rows of lse[r] - logits[r, target[r]]
// (0 when no row counts). A target >= vocab throws Error("cross_entropy", ...)
// naming the row and the target. The mean is summed in double in row order.
//
// Backward, dloss one element:
//   dlogits[r, :] = dloss / counted * (softmax(logits[r, :]) - onehot(target[r]))
//   and zero for rows that do not count. dlogits is overwritten.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, T* loss, int64_t rows,
                           int64_t vocab);

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* dloss,
                            T* dlogits, int64_t rows, int64_t vocab);

}  // namespace spillway::ops
