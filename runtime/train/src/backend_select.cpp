// Backend selection for capplan-train and the catalog peak of a detected GPU.
#include "train/backend_select.h"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include "planner/catalog.h"
#include "planner/spec_io.h"
#include "train/cuda_backend.h"

namespace capplan::rt {
namespace {

const char* kCmd = "<command line>";

bool has_word(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
    const size_t end = at + word.size();
    const bool right = end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end]));
    if (left && right) return true;
  }
  return false;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::unique_ptr<Backend> make_train_backend(const BackendRequest& r, Diagnostics& d) {
  const bool want_cuda = r.backend == "cuda";
  if (r.backend == "cpu" || (r.backend == "auto" && !cuda_built())) {
    if (!r.precision.empty() && r.precision != "fp32") {
      d.error(kCmd, 0, 0, "--precision", "the CPU backend computes in fp32, found '" + r.precision + "'",
              "use --backend cuda on a GPU for bf16 or fp16");
      return nullptr;
    }
    return make_cpu_backend(r.threads);
  }
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (gpus == 0 || r.local_size > gpus) {
    if (!want_cuda) {  // auto: the CPU, unless a 16-bit precision was asked for
      if (!r.precision.empty() && r.precision != "fp32") {
        d.error(kCmd, 0, 0, "--precision",
                r.precision + " needs a GPU: " + (gpus == 0 ? why : std::to_string(r.local_size) +
                                                                        " ranks on this node, " +
                                                                        std::to_string(gpus) + " GPUs"));
        return nullptr;
      }
      return make_cpu_backend(r.threads);
    }
    if (gpus == 0)
      d.error(kCmd, 0, 0, "--backend", "cuda: " + why, "use --backend cpu, or auto, which falls back to the CPU");
    else
      d.error(kCmd, 0, 0, "--backend",
              "cuda: " + std::to_string(r.local_size) + " ranks on this node but " + std::to_string(gpus) +
                  " GPUs visible; capplan-train runs one rank per GPU",
              "start at most " + std::to_string(gpus) + " ranks per node (mpirun --map-by ppr:" +
                  std::to_string(gpus) + ":node)");
    return nullptr;
  }
  CudaBackendOptions o;
  o.device = r.local_rank;
  o.pool_bytes = r.pool_bytes;
  try {
    const CudaDeviceInfo dev = cuda_device_info(o.device);
    if (r.precision == "fp32") o.precision = GemmPrecision::Fp32;
    else if (r.precision == "fp16") o.precision = GemmPrecision::Fp16;
    else if (r.precision == "bf16" || dev.bf16) o.precision = GemmPrecision::Bf16;
    else o.precision = GemmPrecision::Fp16;  // default on a GPU without bf16 (V100)
    return make_cuda_backend(o);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    d.error(kCmd, 0, 0, msg.rfind("--precision", 0) == 0 ? "--precision" : "--backend", msg);
    return nullptr;
  }
}

std::string catalog_gpu_for_device(const std::string& device_name, double memory_gib) {
  const std::string dev = lower(device_name);
  const bool pcie = dev.find("pcie") != std::string::npos;
  std::string best;
  double best_gap = 0.10;
  for (const CatalogEntry& e : catalog_gpus()) {
    const std::string name = lower(e.name);
    const std::string family = name.substr(0, name.find('-'));
    if (!has_word(dev, family) || pcie != (name.find("pcie") != std::string::npos)) continue;
    const auto gpu = load_gpu(e.name);
    if (!gpu.value || gpu.value->memory_gib <= 0) continue;
    const double gap = std::fabs(gpu.value->memory_gib - memory_gib) / gpu.value->memory_gib;
    if (gap <= best_gap) {
      best_gap = gap;
      best = e.name;
    }
  }
  return best;
}

PeakFlops catalog_peak_for_device(const std::string& device_name, double memory_gib, const std::string& precision) {
  PeakFlops p;
  const std::string name = catalog_gpu_for_device(device_name, memory_gib);
  if (name.empty()) {
    p.source = "unknown: " + device_name + " is not in the GPU catalog";
    return p;
  }
  const auto gpu = load_gpu(name);
  const double tflops = precision == "fp32"   ? gpu.value->peak_tflops_fp32
                        : precision == "fp16" ? gpu.value->peak_tflops_fp16
                                              : gpu.value->peak_tflops_bf16;
  if (tflops <= 0) {
    p.source = "unknown: the catalog has no " + precision + " peak for " + name;
    return p;
  }
  p.flops_per_s = tflops * 1e12;
  p.source = "catalog: " + name + " dense " + precision + " peak " + std::to_string(int(tflops)) + " TFLOP/s";
  return p;
}

}  // namespace capplan::rt
