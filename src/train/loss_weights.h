// The per-token weights of the masked loss (ops/cross_entropy.h's weighted
// form): how an optimizer step's loss is the mean over the tokens it counts,
// whichever micro-batch and rank each one is in.
//
// The engines sum the gradients of an optimizer step's M micro-batches on
// each of R ranks and scale the sum by 1 / (M R); they report the loss as
// the mean of the micro-batches' losses over M and R. Each counted token
// therefore gets the weight M R / N, N counting the tokens of the whole step
// on all ranks (targets >= 0): each micro-batch's loss is then its share of
// the step's sum over N, and after the engines' scaling the loss and its
// gradient are those of one batch holding all N tokens, however they fall
// over micro-batches and ranks. The mean of per-micro-batch means, which
// the unweighted loss gives, weighs a token of a micro-batch with few
// counted tokens more than one with many.
#pragma once

#include <cstdint>
#include <span>

namespace spillway::train {

// Targets that count (>= 0).
int64_t counted_targets(std::span<const int32_t> targets);

// M R / N, or 0 when the step counts no token.
double loss_token_weight(int64_t micro_batches, int ranks, double step_counted_tokens);

// out[i] = weight where targets[i] counts, else 0.
void fill_loss_weights(std::span<const int32_t> targets, double weight, std::span<float> out);

}  // namespace spillway::train
