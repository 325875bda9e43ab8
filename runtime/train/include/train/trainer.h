// capplan-train's training loop: options from the command line (io/train_options.h, every mistake
// collected in one pass), MPI process groups for the layout, the GPT model on the CPU backend, data-parallel AdamW
// (plain or ZeRO-1), checkpoints with auto-resume and metrics. Rank 0 prints; every rank agrees on
// failure through a collective before exiting, so a bad input never leaves a rank hanging.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/diagnostics.h"
#include "planner/spec.h"
#include "io/train_options.h"
#include "train/optimizer.h"

namespace capplan::rt {

// TrainOptions, its flags and their parser are the run contract of io/train_options.h, shared with
// the launcher.

// The whole `capplan-train` run (MPI must not be initialised yet; this initialises and finalises
// it). Returns the process exit status: 0 ok, 2 bad input, 1 runtime failure.
int train_main(int argc, char** argv);

}  // namespace capplan::rt
