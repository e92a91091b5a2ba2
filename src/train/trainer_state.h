// What a checkpoint's trainer_state.json holds for resuming: the step, the
// data sampler's position, the loss curves, the checkpointed options, and
// how many updates were skipped for a non-finite loss. A resumed run trusts
// none of it blindly: every field is checked for its type and range, and
// against the options and the optimizer it resumes with, since a hand-edited
// or damaged state would otherwise hang (a sampler skipping 2^40 draws) or
// silently train on other data.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "train/batch_sampler.h"
#include "train/loss_plot.h"
#include "train/run_config.h"

namespace spillway::train {

struct TrainerState {
  int64_t step = 0;           // optimizer steps done
  int64_t skipped_steps = 0;  // of them, updates skipped: the optimizer took step - skipped_steps
  SamplerState sampler;
  LossCurves curves;
  nlohmann::json options;  // run_config_fields.h's checkpointed_json
};

// How the sampler whose state is kept drew its rows.
enum class SampledRows : uint8_t {
  windows,   // a token file's windows: one draw a row, every target counted
  examples,  // instruction examples one a row: one draw a row, some targets counted
  packed,    // instruction examples packed (train/instruction_packing.h): one draw or more a row
};

// The JSON save_checkpoint writes (it adds the format and the step).
nlohmann::json trainer_state_json(const TrainerState& state);

// Reads what load_trainer_state returned; Error naming `path` and the field
// when one is missing, of the wrong type or out of range.
TrainerState read_trainer_state(const nlohmann::json& state, const std::string& path);

// Error naming `path` and the field when the state does not belong to a run
// with `schedule` (the checkpointed options, restored) whose optimizer has
// taken `optimizer_steps` updates: the sampler must have drawn exactly the
// rows of `step` optimizer steps (packed: at least one example a row; the
// trainer replays the walk for the exact count), and counted at most their
// tokens (all of them for windows, whose every target counts).
void check_trainer_state(const TrainerState& state, const ScheduleConfig& schedule, int64_t optimizer_steps,
                         SampledRows sampled, const std::string& path);

}  // namespace spillway::train
