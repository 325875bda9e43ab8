// The CUDA backend of capplan-train (built when configure finds nvcc, cuBLAS and NCCL): the
// kernels of backend.h on one GPU, over fp32 buffers carved from one device pool allocated at
// start. GEMMs go to cuBLAS with fp32 accumulation; the precision says what the tensor cores
// multiply (bf16, fp16, or fp32 exactly). Nothing here includes a CUDA header, so the trainer
// compiles the same with or without CUDA; without it these functions say it was not built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/backend.h"

namespace capplan::rt {

// What the GEMMs multiply in: Fp32 = exact fp32 (no TF32); Bf16 / Fp16 = operands rounded to
// bf16 / fp16 on the tensor cores, products accumulated in fp32 (cuBLAS COMPUTE_32F_FAST_16BF /
// _16F). Every other kernel computes in fp32.
enum class GemmPrecision { Fp32, Bf16, Fp16 };

struct CudaDeviceInfo {
  int index = 0;
  std::string name;             // e.g. "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int64_t memory_bytes = 0;     // total device memory
  int64_t free_bytes = 0;       // free when asked
  std::string driver_version;   // CUDA version the driver supports, "13.0"
  std::string runtime_version;  // CUDA runtime capplan-train was built with
  bool bf16 = false;            // compute capability >= 8.0
};

struct CudaBackendOptions {
  int device = 0;
  GemmPrecision precision = GemmPrecision::Bf16;
  // The device pool: every allocate() is carved from it. 0 = the device's free memory less a
  // reserve of max(1.5 GiB, 6 %) for the CUDA context, cuBLAS and NCCL.
  int64_t pool_bytes = 0;
};

// True when this build has the CUDA backend.
bool cuda_built();
// What configure built ("CPU + CUDA (nvcc 13.0, sm 80;90, ...)" or "CPU only (...)").
std::string cuda_build_status();
// Visible devices; 0 with the reason in *why (no driver, no device, CUDA not built).
int cuda_device_count(std::string* why);
CudaDeviceInfo cuda_device_info(int device);
// Throws std::runtime_error with the reason (no device, pool too large for the device, ...).
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

}  // namespace capplan::rt
