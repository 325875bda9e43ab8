// `capplan-train measure`: the runtime's kernels and collectives timed on this machine, written as
// a device profile for the planner (capplan profile --measure runs it under mpirun).
#pragma once

namespace capplan::rt {

// argv[0] is "measure". Exit status 0, 1 (the profile could not be written) or 2 (bad input).
int measure_main(int argc, char** argv);

// How many copies of a kernel's operands (`operand_bytes` each) the measurement cycles through,
// one a call, so that between two uses of a copy the bytes of one pass over the model
// (`pass_bytes`: in training a GEMM's operands were last touched a pass over the model ago) go
// through the caches, as in a step: ceil(pass_bytes / operand_bytes), but no more than fill the
// last-level cache twice (beyond that the operands come from memory either way), and 1 to 64.
int cold_operand_copies(double pass_bytes, double operand_bytes, double llc_bytes);

}  // namespace capplan::rt
