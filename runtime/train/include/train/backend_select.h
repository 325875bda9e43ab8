// Which backend a capplan-train rank runs on (--backend auto|cpu|cuda, --precision), with the
// mistakes that stop a run named as diagnostics: --backend cuda without a device or with more
// ranks on the node than GPUs, bf16 on a GPU without it. And the peak a GPU's MFU is measured
// against: the catalog's figure for the detected GPU, found by its device name, or unknown.
#pragma once

#include <memory>
#include <string>

#include "io/metrics.h"
#include "planner/diagnostics.h"
#include "train/backend.h"

namespace capplan::rt {

struct BackendRequest {
  std::string backend = "auto";  // auto | cpu | cuda
  std::string precision;         // bf16 | fp16 | fp32 | "" (the backend's default)
  int local_rank = 0, local_size = 1;  // this rank on its node; the GPU is local_rank
  int threads = 1;                     // CPU backend threads
  int64_t pool_bytes = 0;              // CUDA device pool; 0 = the device's free memory less a reserve
};

// nullptr with the reason in `d` (file "<command line>", the flag) when the request cannot run.
std::unique_ptr<Backend> make_train_backend(const BackendRequest& r, Diagnostics& d);

// The catalog GPU whose family (the name up to the first '-': "H200", "A100") is a word of the
// device name and whose memory is within 10 % of the device's ("NVIDIA A100-SXM4-80GB",
// 81920 MiB -> A100-SXM4-80GB); a PCIe part matches only a PCIe entry. Empty when none.
std::string catalog_gpu_for_device(const std::string& device_name, double memory_gib);
// The dense peak of that GPU for the precision (flops_per_s 0 and source "unknown: ..." when
// the catalog lacks the GPU: never a guess).
PeakFlops catalog_peak_for_device(const std::string& device_name, double memory_gib, const std::string& precision);

}  // namespace capplan::rt
