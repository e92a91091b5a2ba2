// Every op of the IR, one line each. The OpKind enum (graph/graph.h), op
// names and the registry of definitions (ops/op_registry.cc) all expand
// this list, so registering an op is adding its line here; its definition,
// ops::<kind>_def, lives beside its kernels in src/ops/<family>_op.cc.
//
// No include guard: each includer defines SPW_OP(kind) first.
SPW_OP(fill)  // a constant: the loss's seed gradient
SPW_OP(embedding)
SPW_OP(embedding_backward)
SPW_OP(rmsnorm)
SPW_OP(rmsnorm_backward)
SPW_OP(matmul)
SPW_OP(rope)
SPW_OP(rope_backward)
SPW_OP(attention)
SPW_OP(attention_backward)
SPW_OP(swiglu)
SPW_OP(swiglu_backward)
SPW_OP(add)
SPW_OP(cross_entropy)
SPW_OP(cross_entropy_backward)
// lm_head, the loss and their backward over chunks of rows (ops/linear_cross_entropy.h)
SPW_OP(linear_cross_entropy)
SPW_OP(cast)
// LoRA's dropout on an adapter's input; its own gradient (ops/dropout_op.h)
SPW_OP(dropout)
// Rows of a sequence taken out and joined (ops/rows_op.h): context parallelism's chunks
SPW_OP(take_rows)
SPW_OP(concat_rows)
// Collectives among the ranks of a group (ops/collective_op.h), placed by the
// tensor-parallel pass (graph/tensor_parallel.h).
SPW_OP(all_reduce)
SPW_OP(all_gather)
SPW_OP(reduce_scatter)
