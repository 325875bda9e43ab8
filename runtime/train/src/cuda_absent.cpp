// Built instead of the CUDA backend when configure found no CUDA toolkit: the functions of
// cuda_backend.h and nccl_communicator.h say so (and why), so `--backend cuda` is refused with
// the reason and `--backend auto` takes the CPU.
#include <stdexcept>

#include "train/cuda_backend.h"
#include "train/nccl_communicator.h"

#ifndef CAPPLAN_CUDA_STATUS_TEXT
#define CAPPLAN_CUDA_STATUS_TEXT "CPU only"
#endif

namespace capplan::rt {

bool cuda_built() { return false; }
std::string cuda_build_status() { return CAPPLAN_CUDA_STATUS_TEXT; }
int cuda_device_count(std::string* why) {
  if (why) *why = std::string("this capplan-train was built without CUDA: ") + CAPPLAN_CUDA_STATUS_TEXT;
  return 0;
}
CudaDeviceInfo cuda_device_info(int) { throw std::runtime_error("this capplan-train was built without CUDA"); }
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions&) {
  throw std::runtime_error(std::string("--backend cuda: this capplan-train was built without CUDA: ") +
                           CAPPLAN_CUDA_STATUS_TEXT);
}
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>) {
  throw std::runtime_error("this capplan-train was built without NCCL");
}
void use_nccl(ProcessGroups&) { throw std::runtime_error("this capplan-train was built without NCCL"); }

}  // namespace capplan::rt
