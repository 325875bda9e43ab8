// `capplan models`, `capplan clusters` and `capplan frameworks`: the embedded presets with a
// one-line summary and the source of their figures (for frameworks, also what each can run).
#include <cstdio>

#include "cli_common.h"
#include "planner/catalog.h"
#include "planner/profile.h"
#include "planner/spec_io.h"

namespace capplan::cli {

namespace {

int list(int argc, char** argv, const char* command, const std::vector<CatalogEntry>& entries,
         bool models) {
  const std::vector<FlagSpec> flags = {json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags);
  if (args.help()) {
    print_help(command, "[--json]", flags);
    return kExitOk;
  }
  if (diags.has_errors()) return report(diags);

  auto source_of = [&](const CatalogEntry& e) -> std::string {
    if (models) {
      const Loaded<ModelSpec> m = load_model(e.name);
      return m.value ? m.value->source : std::string();
    }
    const Loaded<ClusterSpec> c = load_cluster(e.name);
    return c.value ? c.value->source : std::string();
  };
  auto params_of = [&](const CatalogEntry& e) -> double {
    const Loaded<ModelSpec> m = load_model(e.name);
    return m.value ? profile_model(*m.value, 1, m.value->seq_len, 1).total_params : 0.0;
  };

  if (args.has("json")) {
    JsonWriter w;
    w.begin_array();
    for (const CatalogEntry& e : entries) {
      w.begin_object();
      w.field("name", e.name).field("summary", e.summary).field("source", source_of(e));
      w.field("file", e.file).field("kind", models ? "model" : "cluster");
      if (models) w.field("params", params_of(e));
      w.end_object();
    }
    if (!models) {
      for (const CatalogEntry& e : catalog_gpus()) {
        w.begin_object();
        w.field("name", e.name).field("summary", e.summary).field("file", e.file);
        w.field("kind", "gpu");
        w.end_object();
      }
    }
    w.end_array();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  for (const CatalogEntry& e : entries) {
    if (models)
      std::printf("%-15s %s parameters: %s\n", e.name.c_str(), fmt_si(params_of(e)).c_str(),
                  e.summary.c_str());
    else
      std::printf("%-15s %s\n", e.name.c_str(), e.summary.c_str());
    std::printf("%-15s source: %s\n", "", source_of(e).c_str());
  }
  if (!models) {
    std::printf("\nGPUs (usable as `gpu:` in a cluster file):\n");
    for (const CatalogEntry& e : catalog_gpus())
      std::printf("%-15s %s\n", e.name.c_str(), e.summary.c_str());
  }
  return kExitOk;
}

}  // namespace


namespace {

void framework_json(JsonWriter& w, const std::string& name, const std::string& summary, const std::string& file,
                    const FrameworkSpec& fw) {
  w.begin_object();
  w.field("name", name).field("summary", summary).field("source", fw.source).field("file", file);
  w.field("attention", to_string(fw.attention)).field("flash_kernel", to_string(fw.flash_kernel));
  w.field("tensor_parallel", fw.tensor_parallel).field("pipeline_parallel", fw.pipeline_parallel);
  w.field("context_parallel", fw.context_parallel).field("expert_parallel", fw.expert_parallel);
  w.field("sequence_parallel", fw.sequence_parallel).field("selective_recompute", fw.selective_recompute);
  w.field("activation_offload", fw.activation_offload);
  w.key("zero_stages").begin_array();
  for (int z = 0; z < 4; ++z)
    if (fw.has_zero(z)) w.value(z);
  w.end_array();
  w.key("schedules").begin_array();
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    if (fw.pipeline_parallel && fw.has_schedule(s)) w.value(to_string(s));  // none without a pipeline
  w.end_array();
  w.end_object();
}

// `capplan frameworks NAME`: a preset's file as it is embedded (its comments say where each figure
// comes from), to copy and change into a framework file of one's own; a framework file's path: its
// whole spec, every key filled in (framework_to_yaml). --json: the one entry of the list.
int show_framework(const std::string& ref, bool json) {
  const CatalogEntry* e = find_catalog_framework(ref);
  const Loaded<FrameworkSpec> f = load_framework(ref);
  if (!f.value) return report(f.diagnostics);
  if (json) {
    JsonWriter w;
    framework_json(w, f.value->name, e ? e->summary : std::string(), e ? e->file : ref, *f.value);
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("%s", e ? e->text.c_str() : framework_to_yaml(*f.value).c_str());
  }
  return kExitOk;
}

}  // namespace

int cmd_frameworks(int argc, char** argv) {
  const std::vector<FlagSpec> flags = {json_flag()};
  Diagnostics diags;
  const Args args = parse_args(argc, argv, flags, diags, 1);
  if (args.help()) {
    print_help("frameworks", "[NAME] [--json]", flags);
    std::printf("\nNAME: print that preset's file (or a framework file's whole spec), to copy and change\n");
    return kExitOk;
  }
  if (diags.has_errors()) return report(diags);
  const bool json = args.has("json");
  if (!args.positional().empty()) return show_framework(args.positional()[0], json);
  JsonWriter w;
  if (json) w.begin_array();
  for (const CatalogEntry& e : catalog_frameworks()) {
    const Loaded<FrameworkSpec> f = load_framework(e.name);
    if (!f.value) return report(f.diagnostics);
    const FrameworkSpec& fw = *f.value;
    if (!json) {
      std::printf("%-17s %s\n%-17s %s\n%-17s source: %s\n", e.name.c_str(), e.summary.c_str(), "",
                  framework_layouts(fw).c_str(), "", fw.source.c_str());
      continue;
    }
    framework_json(w, e.name, e.summary, e.file, fw);
  }
  if (json) {
    w.end_array();
    std::printf("%s\n", w.str().c_str());
  }
  return kExitOk;
}

int cmd_models(int argc, char** argv) {
  return list(argc, argv, "models", catalog_models(), true);
}

int cmd_clusters(int argc, char** argv) {
  return list(argc, argv, "clusters", catalog_clusters(), false);
}

}  // namespace capplan::cli
