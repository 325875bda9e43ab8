// The NCCL communicator of capplan-train (built with the CUDA backend): one NCCL communicator per
// dp / pp / tp group, created from a unique id that the group's rank 0 makes and broadcasts over
// the group's MPI communicator. Collectives on device buffers go to NCCL, each kind on its own
// stream (all-reduce, reduce-scatter / all-gather, point-to-point); host buffers (the loss, the
// resume checks) stay on MPI, which also stays the launcher. No CUDA header here.
#pragma once

#include <memory>

#include "train/communicator.h"

namespace capplan::rt {

// Wraps `mpi` (kept for host buffers and the barrier); needs the CUDA device set and every rank
// of the group calling it at the same time. Throws std::runtime_error when NCCL fails (with the
// file and line) or when this build has no NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> mpi);

// Replaces the dp, pp, tp, cp, dp x cp, ep and expert-dp groups of `groups` by NCCL
// communicators (in that order on every rank; world stays MPI).
void use_nccl(ProcessGroups& groups);

}  // namespace capplan::rt
