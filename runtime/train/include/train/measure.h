// `capplan-train measure`: the runtime's kernels and collectives timed on this machine, written as
// a device profile for the planner (capplan profile --measure runs it under mpirun).
#pragma once

namespace capplan::rt {

// argv[0] is "measure". Exit status 0, 1 (the profile could not be written) or 2 (bad input).
int measure_main(int argc, char** argv);

}  // namespace capplan::rt
