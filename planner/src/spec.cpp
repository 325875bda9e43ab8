// Names of the spec enums as used on the command line, in YAML and in JSON, and their parsers.
// Parsing is case-insensitive and accepts a few common spellings ("1F1B", "pipedream"); printing
// always gives the canonical lower-case name.
#include "planner/spec.h"

#include <algorithm>
#include <cstdio>
#include <cctype>

namespace capplan {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}
}  // namespace

std::string Layout::grid() const {
  std::string g = "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " + std::to_string(pp);
  if (cp > 1) g += " x cp " + std::to_string(cp);
  if (ep > 1) g += " (ep " + std::to_string(ep) + ")";
  return g;
}

const char* to_string(Ffn v) {
  switch (v) {
    case Ffn::Gelu: return "gelu";
    case Ffn::Swiglu: return "swiglu";
  }
  return "?";
}

const char* to_string(Norm v) {
  switch (v) {
    case Norm::LayerNorm: return "layernorm";
    case Norm::RmsNorm: return "rmsnorm";
  }
  return "?";
}

const char* to_string(PositionEmbedding v) {
  switch (v) {
    case PositionEmbedding::Learned: return "learned";
    case PositionEmbedding::Rope: return "rope";
  }
  return "?";
}

const char* to_string(Precision v) {
  switch (v) {
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
    case Precision::Fp32: return "fp32";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

const char* to_string(Attention v) {
  switch (v) {
    case Attention::Eager: return "eager";
    case Attention::Fused: return "fused";
    case Attention::Flash: return "flash";
  }
  return "?";
}

const char* to_string(FlashKernel v) {
  switch (v) {
    case FlashKernel::Fa2: return "fa2";
    case FlashKernel::Fa3: return "fa3";
    case FlashKernel::Cudnn: return "cudnn";
    case FlashKernel::Fa1: return "fa1";
  }
  return "?";
}

const char* to_string(Optimizer v) {
  switch (v) {
    case Optimizer::Adam: return "adam";
    case Optimizer::Sgd: return "sgd";
  }
  return "?";
}

const char* to_string(Zero3Comm v) {
  switch (v) {
    case Zero3Comm::Ring: return "ring";
    case Zero3Comm::RankShare: return "rank-share";
  }
  return "?";
}

const char* to_string(Zero3BackwardPrefetch v) {
  switch (v) {
    case Zero3BackwardPrefetch::Pre: return "pre";
    case Zero3BackwardPrefetch::Post: return "post";
    case Zero3BackwardPrefetch::None: return "none";
  }
  return "?";
}

const char* to_string(Zero3Collectives v) {
  switch (v) {
    case Zero3Collectives::Module: return "module";
    case Zero3Collectives::Tensor: return "tensor";
  }
  return "?";
}

const char* to_string(Zero3Unit v) {
  switch (v) {
    case Zero3Unit::Layer: return "layer";
    case Zero3Unit::Linear: return "linear";
  }
  return "?";
}

const char* to_string(Recompute v) {
  switch (v) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

std::string layout_summary(const Layout& l, const std::string& sep) {
  std::string out;
  auto add = [&](const char* name, int v) {
    if (!out.empty()) out += sep;
    out += name;
    out += std::to_string(v);
  };
  auto word = [&](const char* w) {
    out += sep;
    out += w;
  };
  add("dp ", l.dp);
  add("tp ", l.tp);
  add("pp ", l.pp);
  if (l.cp > 1) add("cp ", l.cp);
  if (l.ep > 1) add("ep ", l.ep);
  if (l.vp > 1) add("vp ", l.vp);
  add("mbs ", l.mbs);
  if (l.zero > 0) add("z", l.zero);
  if (l.recompute == Recompute::Selective) word("sel");
  if (l.recompute == Recompute::Full) word("full");
  if (l.offload) word("offload");
  if (l.sp) word("sp");
  if (l.schedule == Schedule::GPipe) word("gpipe");
  return out;
}

const char* to_string(Schedule v) {
  switch (v) {
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
    case Schedule::Interleaved: return "interleaved";
  }
  return "?";
}

std::optional<Ffn> parse_ffn(const std::string& s) {
  const std::string l = lower(s);
  if (l == "gelu" || l == "gelu_new" || l == "mlp") return Ffn::Gelu;
  if (l == "swiglu" || l == "silu") return Ffn::Swiglu;
  return std::nullopt;
}

std::optional<Norm> parse_norm(const std::string& s) {
  const std::string l = lower(s);
  if (l == "layernorm" || l == "layer_norm") return Norm::LayerNorm;
  if (l == "rmsnorm" || l == "rms_norm") return Norm::RmsNorm;
  return std::nullopt;
}

std::optional<PositionEmbedding> parse_position(const std::string& s) {
  const std::string l = lower(s);
  if (l == "learned" || l == "absolute") return PositionEmbedding::Learned;
  if (l == "rope" || l == "rotary") return PositionEmbedding::Rope;
  return std::nullopt;
}

std::optional<Precision> parse_precision(const std::string& s) {
  const std::string l = lower(s);
  if (l == "bf16" || l == "bfloat16") return Precision::Bf16;
  if (l == "fp16" || l == "float16" || l == "half") return Precision::Fp16;
  if (l == "fp32" || l == "float32") return Precision::Fp32;
  if (l == "fp8" || l == "float8") return Precision::Fp8;
  return std::nullopt;
}

std::optional<Recompute> parse_recompute(const std::string& s) {
  const std::string l = lower(s);
  if (l == "none" || l == "off" || l == "no") return Recompute::None;
  if (l == "selective") return Recompute::Selective;
  if (l == "full") return Recompute::Full;
  return std::nullopt;
}

std::optional<Schedule> parse_schedule(const std::string& s) {
  const std::string l = lower(s);
  if (l == "gpipe") return Schedule::GPipe;
  if (l == "1f1b" || l == "pipedream" || l == "pipedream-flush") return Schedule::OneFOneB;
  if (l == "interleaved" || l == "interleaved-1f1b") return Schedule::Interleaved;
  return std::nullopt;
}

std::optional<std::string> parse_order(const std::string& s) {
  const std::string l = lower(s);
  // SageMaker model parallelism's placement_strategy names (smp docs): "cluster" packs tensor
  // parallel ranks together (= DPT), "spread" spreads them out (= TPD).
  if (l == "cluster") return std::string("DPT");
  if (l == "spread") return std::string("TPD");
  if (s.size() < 3 || s.size() > 5) return std::nullopt;
  std::string u = s;
  for (char& c : u) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (char axis : u)
    if (std::string("DPTCE").find(axis) == std::string::npos ||
        std::count(u.begin(), u.end(), axis) != 1)
      return std::nullopt;
  for (char axis : {'D', 'P', 'T'})
    if (u.find(axis) == std::string::npos) return std::nullopt;
  return u;
}

std::optional<Attention> parse_attention(const std::string& s) {
  const std::string l = lower(s);
  if (l == "eager") return Attention::Eager;
  if (l == "fused") return Attention::Fused;
  if (l == "flash" || l == "flash-attention" || l == "flashattention") return Attention::Flash;
  return std::nullopt;
}

std::optional<FlashKernel> parse_flash_kernel(const std::string& s) {
  const std::string l = lower(s);
  if (l == "fa1") return FlashKernel::Fa1;
  if (l == "fa2") return FlashKernel::Fa2;
  if (l == "fa3") return FlashKernel::Fa3;
  if (l == "cudnn") return FlashKernel::Cudnn;
  return std::nullopt;
}

std::optional<Optimizer> parse_optimizer(const std::string& s) {
  const std::string l = lower(s);
  if (l == "adam" || l == "adamw") return Optimizer::Adam;
  if (l == "sgd") return Optimizer::Sgd;
  return std::nullopt;
}

std::optional<Zero3Comm> parse_zero3_comm(const std::string& s) {
  const std::string l = lower(s);
  if (l == "ring") return Zero3Comm::Ring;
  if (l == "rank-share") return Zero3Comm::RankShare;
  return std::nullopt;
}

std::optional<Zero3BackwardPrefetch> parse_zero3_backward_prefetch(const std::string& s) {
  const std::string l = lower(s);
  if (l == "pre") return Zero3BackwardPrefetch::Pre;
  if (l == "post") return Zero3BackwardPrefetch::Post;
  if (l == "none") return Zero3BackwardPrefetch::None;
  return std::nullopt;
}

std::optional<Zero3Unit> parse_zero3_unit(const std::string& s) {
  const std::string l = lower(s);
  if (l == "layer") return Zero3Unit::Layer;
  if (l == "linear") return Zero3Unit::Linear;
  return std::nullopt;
}

std::optional<Zero3Collectives> parse_zero3_collectives(const std::string& s) {
  const std::string l = lower(s);
  if (l == "module") return Zero3Collectives::Module;
  if (l == "tensor") return Zero3Collectives::Tensor;
  return std::nullopt;
}

std::string framework_layouts(const FrameworkSpec& f) {
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  std::string schedules, zero;
  for (Schedule s : {Schedule::OneFOneB, Schedule::Interleaved, Schedule::GPipe}) {
    if (!f.has_schedule(s)) continue;
    if (!schedules.empty()) schedules += '/';
    schedules += to_string(s);
  }
  for (int z = 0; z < 4; ++z) {
    if (!f.has_zero(z)) continue;
    if (!zero.empty()) zero += ',';
    zero += char('0' + z);
  }
  char line[320];
  std::snprintf(line, sizeof line,
                "tp %s  pp %s  zero %s  cp %s  ep %s  sp %s  selective %s  offload %s  attention %s  flash kernel %s",
                yes(f.tensor_parallel),
                f.pipeline_parallel ? schedules.c_str() : "no", zero.c_str(), yes(f.context_parallel),
                yes(f.expert_parallel), yes(f.sequence_parallel), yes(f.selective_recompute), yes(f.activation_offload),
                to_string(f.attention), to_string(f.flash_kernel));
  return line;
}

}  // namespace capplan
