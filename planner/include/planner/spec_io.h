// Loading specs from YAML files, Hugging Face config.json files and embedded presets, with every
// problem reported in one pass (diagnostics.h). JSON is read through yaml-cpp (JSON is YAML 1.2).
#pragma once

#include <string>

#include "planner/diagnostics.h"
#include "planner/spec.h"

namespace capplan {

// `ref` is a preset name (catalog.h) or a path to a YAML file or a Hugging Face config.json.
Loaded<ModelSpec> load_model(const std::string& ref);
Loaded<ClusterSpec> load_cluster(const std::string& ref);
// `ref` is a GPU catalog name (A100-SXM4-40GB, ...).
Loaded<GpuSpec> load_gpu(const std::string& ref);
// `ref` is a framework preset name (configs/frameworks/: megatron-lm, megatron-core, deepspeed,
// fsdp, smp-v1, ...) or a path to a YAML file of the same keys.
Loaded<FrameworkSpec> load_framework(const std::string& ref);
Loaded<FrameworkSpec> parse_framework_yaml(const std::string& text, const std::string& file);
// A framework spec as YAML that parse_framework_yaml reads back to the same spec, every key
// written (plan files carry a framework that is not a preset this way), each line after `indent`.
std::string framework_to_yaml(const FrameworkSpec& f, const std::string& indent = {});

// From text already in memory; `file` names it in diagnostics.
Loaded<ModelSpec> parse_model_yaml(const std::string& text, const std::string& file);
Loaded<ModelSpec> parse_model_hf_json(const std::string& text, const std::string& file);
Loaded<ClusterSpec> parse_cluster_yaml(const std::string& text, const std::string& file);

// A model as the YAML parse_model_yaml reads back, every key on its own line preceded by
// `indent` (plan files nest it under "model:"; capplan-train and job scripts read it as is).
std::string model_to_yaml(const ModelSpec& m, const std::string& indent = {});

// Semantic checks shared by every loader (> 0, heads divides hidden, kv_heads divides heads, ...).
void validate_model(const ModelSpec& m, const std::string& file, Diagnostics& out);
void validate_cluster(const ClusterSpec& c, const std::string& file, Diagnostics& out);

// Numbers as users write them: "300e9", "1.5e12", "2048", "300B", "1.3T". nullopt if not a number.
std::optional<double> parse_number(const std::string& s);

}  // namespace capplan
