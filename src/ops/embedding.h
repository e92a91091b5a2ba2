// Token embedding lookup.
//
// Contract: ids [tokens] (int32), table [vocab, dim], out [tokens, dim]:
//   out[t, :] = table[ids[t], :]
// An id outside [0, vocab) throws Error("embedding", ...) naming the id and
// its position.
//
// Backward: dtable[v, :] = sum over t with ids[t] == v of dout[t, :].
// dtable is overwritten (rows no token uses become zero). The sum runs in token
// order for every row, so the result does not depend on the thread count.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t tokens, int64_t vocab,
                       int64_t dim);

template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t tokens,
                        int64_t vocab, int64_t dim);

}  // namespace spillway::ops
