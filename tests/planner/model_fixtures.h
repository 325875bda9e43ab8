// Hand-built scenarios for the cost-model tests: small enough to count by hand, independent of
// the embedded catalog.
#pragma once

#include "planner/cost_model.h"

namespace capplan::test {

// 2 layers, h 64, 4 heads, vocab 1000, seq 32, f = 4h, GeLU, LayerNorm, learned positions, tied.
inline ModelSpec tiny_model(int layers = 2) {
  ModelSpec m;
  m.name = "tiny";
  m.layers = layers;
  m.hidden = 64;
  m.heads = 4;
  m.vocab = 1000;
  m.seq_len = 32;
  return m;
}

// A100-like GPU on 8-GPU nodes, 300 GB/s NVLink per direction, 100 Gb/s per node, no price.
inline ClusterSpec test_cluster(double memory_gib = 80) {
  ClusterSpec c;
  c.name = "test";
  c.gpus_per_node = 8;
  c.gpu.name = "A100-test";
  c.gpu.memory_gib = memory_gib;
  c.gpu.peak_tflops_fp16 = 312;
  c.gpu.peak_tflops_bf16 = 312;
  c.gpu.peak_tflops_fp32 = 19.5;
  c.gpu.memory_gbyte_per_s = 2039;
  c.gpu.flash_peak_fraction = 0.70;  // A100-SXM4-80GB.yaml: FlashAttention runs (and so does cp's ring)
  c.intra_node_gbyte_per_s = 300;
  c.inter_node_gbit_per_s = 100;
  return c;
}

inline Scenario scenario(const ModelSpec& m, int gpus, int64_t gbs, double memory_gib = 80) {
  Scenario sc;
  sc.model = m;
  sc.cluster = test_cluster(memory_gib);
  sc.gpus = gpus;
  sc.nodes = (gpus + 7) / 8;
  sc.training.gbs = gbs;
  return sc;
}

}  // namespace capplan::test
