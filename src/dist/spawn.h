// `spillway train --nproc-per-node N` on one host without a launcher: this
// process starts its own command line N times as ranks 0..N-1 of one run,
// with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, a free MASTER_PORT), and waits for them. The ranks
// share the terminal: every rank's errors reach it.
#pragma once

namespace spillway::dist {

// Returns this process's exit code: 0 when every rank succeeded. When one
// ends with an error, the others are stopped (SIGTERM, then SIGKILL), and
// one line names the rank and how it ended. A SIGTERM to this process goes
// on to the ranks; SIGINT from a terminal reaches them directly. Ranks that
// a signal stopped cleanly exit with 128 + the signal (training checkpoints
// first): that is no error, and it is this process's exit code too (rank
// 0's where they differ).
int run_local_ranks(int n);

}  // namespace spillway::dist
