// The embedded catalog: model presets, GPUs and instance types from configs/, compiled into the
// binary so that a preset name works anywhere. Each entry carries its source.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace capplan {

struct CatalogEntry {
  std::string name;     // "gpt3-175b", "p4d.24xlarge", "A100-SXM4-40GB"
  std::string summary;  // one line for `capplan models` / `capplan clusters`
  std::string text;     // the YAML as shipped in configs/
  std::string file;     // "configs/models/gpt3-175b.yaml", for diagnostics
};

const std::vector<CatalogEntry>& catalog_models();
const std::vector<CatalogEntry>& catalog_clusters();
const std::vector<CatalogEntry>& catalog_gpus();
const CatalogEntry* find_catalog_model(const std::string& name);
const CatalogEntry* find_catalog_cluster(const std::string& name);
const CatalogEntry* find_catalog_gpu(const std::string& name);
// Example plans from configs/plans/ ("default": GPT-3 175B on 120 x p4d.24xlarge); load one
// with parse_plan_yaml(entry.text, entry.file) or load_plan(name) (plan_io.h).
const std::vector<CatalogEntry>& catalog_plans();
const CatalogEntry* find_catalog_plan(const std::string& name);
// Framework presets (configs/frameworks/): the software stack's known behaviour.
const std::vector<CatalogEntry>& catalog_frameworks();
const CatalogEntry* find_catalog_framework(const std::string& name);

}  // namespace capplan
