// capplan-train's run: flags, layout checks, process groups, model, data, the step loop with
// gradient accumulation, checkpoints, resume and metrics. Every fallible setup stage ends in a
// collective agreement (all_ok), so a problem seen by any rank stops every rank cleanly.
#include "train/trainer.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "planner/json.h"
#include "planner/json_writer.h"
#include "planner/device_profile.h"
#include "planner/schedule.h"
#include "planner/spec_io.h"
#include "train/backend.h"
#include "train/backend_select.h"
#include "train/cuda_backend.h"
#include "train/nccl_communicator.h"
#include "io/checkpoint.h"
#include "train/communicator.h"
#include "io/data.h"
#include "train/gpt.h"
#include "io/metrics.h"
#include "io/metrics_schema.h"

namespace capplan::rt {
namespace {

const char* const kCmd = "<command line>";
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

namespace {

// True on every rank iff `ok` on every rank.
bool all_ok(bool ok) {
  int v = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return v == 1;
}

// Prints rank 0's diagnostics; another rank prints its own only when rank 0 had none to say.
void report_diagnostics(const Diagnostics& d, int rank) {
  int zero_has = (rank == 0 && d.has_errors()) ? 1 : 0;
  MPI_Bcast(&zero_has, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0 || (!zero_has && d.has_errors())) {
    const std::string s = d.to_string();
    if (!s.empty()) std::fprintf(stderr, "%s", s.c_str());
    std::fflush(stderr);
  }
}

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Same 63-bit value on every rank of MPI_COMM_WORLD?
bool same_everywhere(uint64_t h) {
  int64_t v[2] = {int64_t(h >> 1), -int64_t(h >> 1)};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return v[0] == -v[1];
}

std::string model_fingerprint(const ModelSpec& m, int seq_len) {
  std::ostringstream os;
  os << m.name << ":L" << m.layers << ":d" << m.hidden << ":h" << m.heads << ":kv"
     << m.kv_heads_or_default() << ":f" << m.ffn_hidden_or_default() << ":v" << m.vocab << ":T"
     << seq_len << ":" << to_string(m.ffn) << ":" << to_string(m.norm) << ":"
     << to_string(m.position);
  if (m.head_dim > 0 && m.head_dim * m.heads != m.hidden) os << ":hd" << m.head_dim;
  if (m.sliding_window > 0) os << ":sw" << m.sliding_window << "/" << m.global_every;
  if (m.moe.enabled())
    os << ":moe" << m.moe.experts << "x" << m.expert_ffn_hidden_or_default() << ":k"
       << m.moe.top_k_or_default() << ":s" << m.moe.shared_experts << ":f" << m.moe.moe_layer_freq
       << ":d" << m.moe.first_dense_layers;
  return os.str();
}

// Gathers every rank's newline-separated lines to rank 0.
std::vector<std::string> gather_lines(const std::vector<std::string>& mine, int rank, int world) {
  std::string joined;
  for (const auto& l : mine) joined += l + "\n";
  int len = int(joined.size());
  std::vector<int> lens(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < world; ++r) {
      displs[size_t(r)] = total;
      total += lens[size_t(r)];
    }
    all.resize(size_t(total));
  }
  MPI_Gatherv(joined.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> out;
  std::istringstream is(all);
  for (std::string l; std::getline(is, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// The training flags a checkpoint records (resume_checked_keys()), as text.
KeyValues training_meta(const TrainOptions& o) {
  const OptimizerConfig& c = o.optimizer;
  return {{"gbs", std::to_string(o.gbs)},
          {"seed", std::to_string(o.seed)},
          {"lr", shortest_number(c.lr)},
          {"min_lr_ratio", shortest_number(c.min_lr_ratio)},
          {"warmup", std::to_string(c.warmup_steps)},
          {"weight_decay", shortest_number(c.weight_decay)},
          {"clip", shortest_number(c.clip)},
          {"beta1", shortest_number(c.beta1)},
          {"beta2", shortest_number(c.beta2)},
          {"steps", std::to_string(o.steps)},
          {"data", o.data}};
}

class Run {
 public:
  Run(TrainOptions o, int rank, int world) : o_(std::move(o)), rank_(rank), world_(world) {}
  int execute();

 private:
  bool setup(Diagnostics& d);
  bool check_model_and_layout(Diagnostics& d);
  void check_context_and_experts(Diagnostics& d);
  bool build_models(Diagnostics& d);
  void allocate_boundaries();
  bool check_initial_weights();
  bool resume(Diagnostics& d);
  bool check_resumed_flags(const Manifest& manifest, const std::string& step_dir, Diagnostics& d);
  bool load_shard(const std::string& step_dir, Diagnostics& d);
  bool open_metrics();
  // What every rank reports at the start, gathered to rank 0: its host, its placement record and
  // its memory line.
  struct RankReport {
    std::vector<std::string> hosts, placement, memory;
  };
  RankReport report_ranks();
  void announce(const RankReport& report);
  std::string train_steps(SummaryRecord& summary);
  bool save_checkpoint(int64_t steps_done, std::string* error);
  void run_step(int64_t step, StepRecord& rec);
  void apply_updates(int64_t step, double total, OptimizerStats& os);
  double run_schedule(int64_t step, StepRecord& rec, double* pp_wait_s);
  double run_split_microbatches(int64_t step, StepRecord& rec);
  void load_microbatch(int64_t step, int64_t mb);
  // This stage's end of the tied embedding: its model chunk, the parameter, the other end's stage.
  struct TiedEnd {
    Gpt* model = nullptr;
    const ParamInfo* param = nullptr;  // nullptr: a stage without either end
    int peer = 0;
  };
  TiedEnd tied_end();
  void post_tied_gradient();
  void sync_tied_embedding();
  void take_terms_of_busiest_rank(StepRecord& rec);
  void sum_expert_stats();
  void dump_gradients();

  TrainOptions o_;
  int rank_, world_;
  ModelSpec model_spec_;
  int T_ = 0;
  int64_t micro_ = 0;  // micro-batches per step on this DP rank
  ProcessGroups groups_;
  std::unique_ptr<Backend> be_;
  // Batch split over threads: part r of every micro-batch (sequences [r B / n, (r + 1) B / n))
  // runs through its own replica of the model on its own backend, concurrently; replica 0 is
  // models_[0] and owns the weights, the others read them and keep their own gradients, which
  // are summed into replica 0's at the end of the step. n = 1: the threads split every kernel.
  // Declared before the models, which release their buffers through these backends.
  int split_ = 1;
  std::vector<std::unique_ptr<Backend>> part_be_;  // one per part, threads_ / split_ threads
  std::vector<std::unique_ptr<Gpt>> parts_;        // replicas 1 .. split_ - 1
  Backend& model_backend() { return split_ > 1 ? *part_be_[0] : *be_; }
  // "cpu", or "cuda: NVIDIA H200 (device 0, ..., driver CUDA 13.0, runtime CUDA 13.0, ...)".
  std::string backend_text() const {
    const std::string dev = be_->device_description();
    return dev.empty() ? be_->name() : be_->name() + ": " + dev;
  }
  std::string thread_split_text() const {
    if (split_ == 1) return "kernels split over the threads";
    const int per = o_.layout.mbs / split_;
    return "batch split: each micro-batch in " + std::to_string(split_) + " parts of " +
           std::to_string(per) + (per == 1 ? " sequence" : " sequences") + ", one per " +
           (threads_ == split_ ? "thread" : std::to_string(threads_ / split_) + " threads");
  }
  std::vector<std::unique_ptr<Gpt>> models_;      // one per model chunk on this stage (vp)
  std::vector<std::unique_ptr<Optimizer>> opts_;  // one per chunk
  // MoE: one per chunk with experts, over the chunk's expert buffer and the edp group.
  std::vector<std::unique_ptr<Optimizer>> expert_opts_;
  bool moe_ = false;
  std::unique_ptr<DataSource> data_;
  MetricsWriter metrics_;
  std::unique_ptr<SystemSampler> sampler_;
  // CPU ranks with --metrics: the cores' cache-line latency after every step ("core_latency_ns").
  std::unique_ptr<CoreLatencyProbe> core_probe_;
  PeakFlops peak_;
  // fp16 on the GPU: the loss is multiplied by loss_scale_ before the backward, the gradients
  // divided by it in the update; halved on overflow, doubled after 1000 clean steps. Not saved
  // in checkpoints: a resumed fp16 run starts again from 2^16.
  bool dynamic_loss_scale_ = false;
  double loss_scale_ = 1.0;
  int good_steps_ = 0;
  int64_t global_params_ = 0;
  int64_t active_params_ = 0;  // the parameters one token goes through (MoE: top_k experts)
  int64_t start_step_ = 0;
  int threads_ = 1;
  std::vector<int32_t> sample_, tokens_, targets_;
  std::vector<int32_t> cp_pos_;  // the positions of a sequence this rank holds (all without cp)
  // Pipeline: this stage's actions, and device buffers for activations / gradients in flight.
  std::vector<PipelineAction> actions_;
  std::vector<std::vector<float*>> send_fwd_, send_bwd_;  // [chunk][micro-batch], sent async
  float *recv_fwd_ = nullptr, *recv_bwd_ = nullptr;
  std::vector<float*> buffers_;
  double bubble_ = 0;  // last step's measured pipeline bubble (mean over ranks)
  double tied_wait_s_ = 0;  // seconds waited in sync_tied_embedding for the other end's gradient
  std::vector<float> tied_mine_, tied_other_;  // this end's tied gradient (in flight), the other's
  double aux_loss_ = 0;  // last step's load-balancing loss (MoE): sum over MoE layers
  int64_t dropped_ = 0;  // last step's token choices over the experts' capacity (MoE)

 public:
  ~Run() {
    if (be_)
      for (float* p : buffers_) be_->release(p);
  }
};

// The model and the layout against the ranks and the model (every rank computes the same
// diagnostics), and the checkpoint folder, checked before anything is allocated.
bool Run::check_model_and_layout(Diagnostics& d) {
  // Model and layout checks (every rank computes the same diagnostics).
  Loaded<ModelSpec> m = load_model(o_.model);
  d.append(m.diagnostics);
  if (!m.ok()) return false;
  model_spec_ = *m.value;
  T_ = o_.seq_len > 0 ? o_.seq_len : model_spec_.seq_len;
  Layout& L = o_.layout;
  if (L.gpus() != world_)
    d.error(kCmd, 0, 0, L.cp > 1 ? "--dp/--tp/--pp/--cp" : "--dp/--tp/--pp",
            "layout dp * tp * pp * cp = " + std::to_string(L.dp) + " * " + std::to_string(L.tp) +
                " * " + std::to_string(L.pp) + " * " + std::to_string(L.cp) + " = " +
                std::to_string(L.gpus()) + " does not match the " + std::to_string(world_) +
                " MPI ranks",
            "start with mpirun -np " + std::to_string(L.gpus()));
  check_context_and_experts(d);
  const int kv = model_spec_.kv_heads_or_default();
  if (model_spec_.heads % L.tp != 0 || kv % L.tp != 0)
    d.error(kCmd, 0, 0, "--tp",
            "tp " + std::to_string(L.tp) + " does not divide heads " +
                std::to_string(model_spec_.heads) + " and kv_heads " + std::to_string(kv));
  if (L.pp > model_spec_.layers)
    d.error(kCmd, 0, 0, "--pp",
            "pp " + std::to_string(L.pp) + " is greater than the model's " +
                std::to_string(model_spec_.layers) + " layers");
  else if (L.vp > 1 && model_spec_.layers % (L.pp * L.vp) != 0)
    d.error(kCmd, 0, 0, "--vp",
            "vp " + std::to_string(L.vp) + " does not divide the " +
                std::to_string(model_spec_.layers / L.pp) + " layers per stage (layers " +
                std::to_string(model_spec_.layers) + " / pp " + std::to_string(L.pp) + ")");
  if (!o_.checkpoint_dir.empty()) {
    // Checked now, not at the first save: a file in the way or an unwritable folder would
    // otherwise fail only after the first checkpoint interval of training.
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir(o_.checkpoint_dir);
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
      d.error(o_.checkpoint_dir, 0, 0, "--checkpoint-dir", "exists and is not a folder");
    } else {
      fs::create_directories(dir, ec);
      if (!fs::is_directory(dir, ec))
        d.error(o_.checkpoint_dir, 0, 0, "--checkpoint-dir",
                "cannot create the folder" + (ec ? ": " + ec.message() : std::string()));
      else if (::access(dir.c_str(), W_OK | X_OK) != 0)
        d.error(o_.checkpoint_dir, 0, 0, "--checkpoint-dir",
                std::string("cannot write into the folder: ") + std::strerror(errno));
    }
  }
  if (!model_spec_.tied_embeddings)
    d.warning(kCmd, 0, 0, "--model",
              "the model has untied embeddings; capplan-train trains a tied LM head");
  return !d.has_errors();

}

// Context and expert parallelism against the model: cp splits every sequence into 2 * cp equal
// chunks; ep needs an MoE model whose experts it divides.
void Run::check_context_and_experts(Diagnostics& d) {
  const Layout& L = o_.layout;
  const MoeSpec& moe = model_spec_.moe;
  if (L.cp > 1 && T_ % (2 * L.cp) != 0)
    d.error(kCmd, 0, 0, "--cp",
            "cp " + std::to_string(L.cp) + " does not split the sequence of " + std::to_string(T_) +
                " tokens into 2 * cp = " + std::to_string(2 * L.cp) +
                " equal chunks (the load-balanced causal split)",
            "choose --seq or --cp so that 2 * cp divides the sequence");
  if (L.ep > 1 && !moe.enabled())
    d.error(kCmd, 0, 0, "--ep",
            "ep " + std::to_string(L.ep) + " needs a mixture-of-experts model; " + model_spec_.name +
                " is dense (no moe.experts)");
  else if (moe.enabled() && moe.experts % L.ep != 0)
    d.error(kCmd, 0, 0, "--ep",
            "ep " + std::to_string(L.ep) + " does not divide the " + std::to_string(moe.experts) +
                " experts");
  if (moe.enabled() && model_spec_.expert_ffn_hidden_or_default() % L.tp != 0)
    d.error(kCmd, 0, 0, "--tp",
            "tp " + std::to_string(L.tp) + " does not divide moe.expert_ffn_hidden " +
                std::to_string(model_spec_.expert_ffn_hidden_or_default()));
  if (moe.enabled() && L.sp)
    d.error(kCmd, 0, 0, "--sp", "sequence parallelism with mixture-of-experts layers is not supported");
  if (moe.enabled() && L.zero >= 2)
    d.error(kCmd, 0, 0, "--zero",
            "mixture-of-experts models train with --zero 0 or 1 (the experts' gradients are reduced "
            "over their own group)");
}

// The process groups, the backends, and this stage's model chunks (with the batch split's
// replicas) and their optimizers, from the schedule table.
bool Run::build_models(Diagnostics& d) {
  const Layout& L = o_.layout;
  groups_ = make_process_groups(L);
  threads_ = o_.threads > 0 ? o_.threads : cpu_rank_threads(cpus_available(), groups_.local_size);
  BackendRequest br;
  br.backend = o_.backend;
  br.precision = o_.precision;
  br.local_rank = groups_.local_rank;
  br.local_size = groups_.local_size;
  br.threads = threads_;
  be_ = make_train_backend(br, d);
  if (!all_ok(be_ != nullptr)) return false;
  if (be_->name() == "cuda" && L.cp > 1) {
    // Ring attention's block kernels are host loops (backend.h's defaults), not device kernels.
    d.error("<command line>", 0, 0, "--cp", "context parallelism runs on the CPU backend only",
            "use --backend cpu, or --cp 1 on the GPU");
  }
  if (!all_ok(!d.has_errors())) return false;
  if (be_->name() == "cuda") {  // one GPU per rank; NCCL for every process group but world
    threads_ = 1;
    // fp16 GEMM operands: dynamic loss scaling (Micikevicius et al. 2018), from 2^16.
    if (o_.precision == "fp16" || (o_.precision.empty() && !cuda_device_info(groups_.local_rank).bf16)) {
      dynamic_loss_scale_ = true;
      loss_scale_ = 65536.0;
    }
    if (world_ > 1) use_nccl(groups_);
  }
  // Splitting the batch needs no communication inside the step (TP and PP exchange activations,
  // ZeRO-2/3 gradients and weights per layer) and whole sequences per part (attention).
  // (Nor ring attention or expert all-to-alls, which cross ranks inside every layer.)
  moe_ = model_spec_.moe.enabled();
  if (o_.thread_split == "auto" && L.tp == 1 && L.pp == 1 && L.zero <= 1 && L.cp == 1 && !moe_)
    split_ = std::gcd(L.mbs, threads_);
  for (int r = 0; split_ > 1 && r < split_; ++r)
    part_be_.push_back(make_cpu_backend(threads_ / split_));
  GptConfig gc;
  gc.model = model_spec_;
  gc.seq_len = T_;
  gc.mbs = L.mbs / split_;
  gc.defer_weight_grads = split_ > 1;
  gc.tp_rank = groups_.coords.tp;
  gc.tp_size = L.tp;
  gc.seed = o_.seed;
  gc.recompute = L.recompute;
  // The dense weights are replicated over dp x cp: their gradients (and ZeRO shards) go over
  // dp_cp, the experts' over edp.
  gc.param_pad_multiple = L.dp * L.cp;
  gc.offload = L.offload;
  gc.sp = L.sp;
  gc.zero = L.zero;
  gc.dp = groups_.dp_cp.get();
  gc.cp_rank = groups_.coords.cp;
  gc.cp_size = L.cp;
  gc.cp = groups_.cp.get();
  if (moe_) {
    const MoeSpec& ms = model_spec_.moe;
    gc.moe.experts = ms.experts;
    gc.moe.top_k = ms.top_k_or_default();
    gc.moe.ffn_hidden = model_spec_.expert_ffn_hidden_or_default();
    gc.moe.shared_experts = ms.shared_experts;
    gc.moe.capacity_factor = ms.capacity_factor;
    gc.moe.layer_freq = ms.moe_layer_freq;
    gc.moe.first_dense_layers = ms.first_dense_layers;
    gc.moe.aux_loss_coeff = o_.moe_aux_loss_coeff;
    gc.moe.ep_rank = groups_.ep_rank;
    gc.moe.ep_size = L.ep;
    gc.ep = groups_.ep.get();
    gc.expert_pad_multiple = groups_.edp->size();
  }
  micro_ = o_.gbs / (int64_t(L.dp) * L.mbs);
  // One stage runs 1F1B (one micro-batch in flight); otherwise the chosen schedule's table.
  const Schedule sched = L.pp == 1 ? Schedule::OneFOneB : L.schedule;
  const auto table = build_schedule(sched, L.pp, L.vp, int(micro_));
  if (table.size() != size_t(L.pp)) {
    d.error(kCmd, 0, 0, "--schedule",
            std::string("schedule ") + to_string(sched) + " cannot run " + std::to_string(micro_) +
                " micro-batches on " + std::to_string(L.pp) + " stages",
            sched == Schedule::Interleaved ? "interleaved needs gbs / (dp * mbs) divisible by pp"
                                           : "");
    return false;
  }
  const int s = groups_.coords.pp;
  actions_ = table[size_t(s)];
  // Chunk c of stage s is virtual stage v = c * pp + s of pp * vp; virtual stage v holds layers
  // [v * layers / (pp vp), (v + 1) * layers / (pp vp)): sizes differ by at most one.
  const int virtual_stages = L.pp * L.vp;
  for (int c = 0; c < L.vp; ++c) {
    const int v = c * L.pp + s;
    gc.pp_rank = v;
    gc.pp_size = virtual_stages;
    gc.layer_begin = int(int64_t(v) * model_spec_.layers / virtual_stages);
    gc.layer_end = int(int64_t(v + 1) * model_spec_.layers / virtual_stages);
    int inflight = 0, peak = 1;
    for (const PipelineAction& a : actions_) {
      if (a.chunk != c) continue;
      inflight += a.pass == Pass::Forward ? 1 : -1;
      peak = std::max(peak, inflight);
    }
    gc.slots = peak;
    if (std::string why = gpt_check_config(gc); !why.empty()) {
      d.error(kCmd, 0, 0, "--model", why);
      return false;
    }
    models_.push_back(std::make_unique<Gpt>(gc, model_backend(), *groups_.tp));
    models_.back()->init_params();
    GptConfig part = gc;
    part.shared_params = models_.back()->params();
    for (int r = 1; r < split_; ++r)
      parts_.push_back(std::make_unique<Gpt>(part, *part_be_[size_t(r)], *groups_.tp));
    opts_.push_back(std::make_unique<Optimizer>(o_.optimizer, *models_.back(), *be_,
                                                *groups_.dp_cp, *groups_.tp, *groups_.pp));
    if (models_.back()->expert_numel() > 0)
      expert_opts_.push_back(std::make_unique<Optimizer>(o_.optimizer,
                                                         models_.back()->expert_buffer(), *be_,
                                                         *groups_.edp, *groups_.tp, *groups_.pp));
    else
      expert_opts_.push_back(nullptr);
  }
  return true;
}

// The buffers of the activations and gradients sent between stages (one per micro-batch and
// chunk that sends, one receive buffer each way).
void Run::allocate_boundaries() {
  const Layout& L = o_.layout;
  const int virtual_stages = L.pp * L.vp;
  const int64_t n = models_[0]->boundary_numel();
  auto buffer = [&] {
    float* p = be_->allocate(n);
    if (!p) throw std::bad_alloc();
    buffers_.push_back(p);
    return p;
  };
  send_fwd_.resize(size_t(L.vp));
  send_bwd_.resize(size_t(L.vp));
  if (virtual_stages > 1) {
    for (int c = 0; c < L.vp; ++c)
      for (int64_t i = 0; i < micro_; ++i) {
        send_fwd_[size_t(c)].push_back(models_[size_t(c)]->last_stage() ? nullptr : buffer());
        send_bwd_[size_t(c)].push_back(models_[size_t(c)]->first_stage() ? nullptr : buffer());
      }
    recv_fwd_ = buffer();
    recv_bwd_ = buffer();
  }

}

bool Run::setup(Diagnostics& d) {
  if (!check_model_and_layout(d) || !build_models(d)) return false;
  allocate_boundaries();
  const Layout& L = o_.layout;
  DataConfig dc;
  dc.source = o_.data;
  dc.seq_len = T_;
  dc.vocab = model_spec_.vocab;
  dc.seed = o_.seed;
  data_ = data_open(dc, &d);
  if (!data_) return false;
  sample_.resize(size_t(T_) + 1);
  cp_pos_ = cp_positions(T_, L.cp, groups_.coords.cp);
  tokens_.resize(size_t(L.mbs) * cp_pos_.size());
  targets_.resize(size_t(L.mbs) * cp_pos_.size());
  return !d.has_errors();
}

bool Run::resume(Diagnostics& d) {
  if (o_.resume == "never" || (o_.resume == "auto" && o_.checkpoint_dir.empty())) return true;
  const Layout& L = o_.layout;
  KeyValues expected = {{"model", model_fingerprint(model_spec_, T_)},
                        {"dp", std::to_string(L.dp)},
                        {"tp", std::to_string(L.tp)},
                        {"pp", std::to_string(L.pp)},
                        {"zero", std::to_string(L.zero)},
                        {"vp", std::to_string(L.vp)},
                        {"world", std::to_string(world_)}};
  // Recorded by every checkpoint; expected when used, so checkpoints of runs without them load.
  if (L.cp != 1) expected["cp"] = std::to_string(L.cp);
  if (L.ep != 1) expected["ep"] = std::to_string(L.ep);
  std::string step_dir;
  std::optional<Manifest> manifest;
  if (o_.resume == "auto") {
    LatestGood lg = checkpoint_find_latest_good(o_.checkpoint_dir, expected);
    if (rank_ == 0)
      for (const auto& w : lg.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!lg.error.empty()) {
      d.error(o_.checkpoint_dir, 0, 0, "--resume", "newest good checkpoint does not match this run: " + lg.error);
      return false;
    }
    if (!lg.manifest && !lg.failed.empty() && !o_.allow_fresh_start) {
      // Completed checkpoints exist but none verifies: starting over would silently lose them.
      for (const std::string& f : lg.failed)
        d.error(o_.checkpoint_dir, 0, 0, "--resume", "checkpoint fails verification: " + f);
      d.error(o_.checkpoint_dir, 0, 0, "--resume",
              "every completed checkpoint (" + std::to_string(lg.failed.size()) +
                  ") fails verification; not starting over from step 0",
              "repair or move them, or pass --allow-fresh-start to train from scratch "
              "(they are kept, moved into unverified/ as the new checkpoints replace them)");
      return false;
    }
    if (!lg.manifest && !lg.failed_dirs.empty() && rank_ == 0) {
      // A fresh start, allowed: the new saves would overwrite these step folders; keep them.
      for (const std::string& f : lg.failed_dirs) {
        std::string error;
        const std::string to = checkpoint_move_aside(f, &error);
        if (to.empty()) std::fprintf(stderr, "warning: %s\n", error.c_str());
        else std::fprintf(stderr, "warning: %s: fails verification, moved aside to %s\n", f.c_str(), to.c_str());
      }
    }
    if (!lg.manifest) return true;
    step_dir = lg.step_dir;
    manifest = lg.manifest;
  } else {
    std::string why;
    std::error_code ec;
    if (!std::filesystem::exists(o_.resume, ec)) {
      d.error(o_.resume, 0, 0, "--resume", "no such checkpoint folder",
              "name a step folder such as DIR/step-000010, or use --resume auto");
      return false;
    }
    if (!std::filesystem::is_directory(o_.resume, ec)) {
      d.error(o_.resume, 0, 0, "--resume", "not a folder: --resume names a checkpoint's step folder");
      return false;
    }
    std::optional<Manifest> man = checkpoint_verify(o_.resume, &why);
    if (!man) {
      d.error(o_.resume, 0, 0, "--resume", "not a good checkpoint: " + why);
      return false;
    }
    if (std::string mis = checkpoint_check_meta(man->meta, expected); !mis.empty()) {
      d.error(o_.resume, 0, 0, "--resume", "checkpoint does not match this run: " + mis);
      return false;
    }
    step_dir = o_.resume;
    manifest = man;
  }
  return check_resumed_flags(*manifest, step_dir, d) && load_shard(step_dir, d);
}

// The training flags the checkpoint recorded: each difference is refused unless overridden.
// (A checkpoint written before they were recorded has none of them: nothing to compare.)
bool Run::check_resumed_flags(const Manifest& manifest, const std::string& step_dir, Diagnostics& d) {
  const KeyValues now = training_meta(o_);
  for (const std::string& k : resume_checked_keys()) {
    auto it = manifest.meta.find(k);
    if (it == manifest.meta.end() || it->second == now.at(k)) continue;
    const bool allowed = std::find(o_.resume_override.begin(), o_.resume_override.end(), k) !=
                         o_.resume_override.end();
    const std::string what = k + ": the checkpoint has " + it->second + ", this run has " + now.at(k);
    if (allowed) {
      d.warning(step_dir, 0, 0, "--resume-override", what + " (overridden)");
      continue;
    }
    if (k == "steps") {  // extending (or shortening) a run is what resuming is for
      d.warning(step_dir, 0, 0, "--steps",
                what + ": the learning-rate schedule decays over the new length from here");
      continue;
    }
    const auto& ok = resume_overridable_keys();
    d.error(step_dir, 0, 0, "--resume", what,
            std::find(ok.begin(), ok.end(), k) != ok.end()
                ? "pass --resume-override " + k + " to continue with the new value"
                : "the order of the training data depends on it: it cannot be changed on resume");
  }
  return !d.has_errors();
}

// This rank's shard of the checkpoint: parameters (ZeRO-3: the parameter shard) and Adam moments
// of each model chunk, and the step to continue from.
bool Run::load_shard(const std::string& step_dir, Diagnostics& d) {
  std::string error;
  const std::string path = step_dir + "/" + checkpoint_shard_name(rank_);
  std::optional<CheckpointShard> shard = checkpoint_read_shard(path, &error);
  if (!shard) {
    d.error(path, 0, 0, "", error);
    return false;
  }
  auto load = [&](const std::string& name, float* dst, int64_t n) {
    const Tensor* t = shard->find(name);
    if (!t || int64_t(t->data.size()) != n) {
      d.error(path, 0, 0, name, "missing or has the wrong size (expected " + std::to_string(n) + ")");
      return;
    }
    be_->from_host(dst, t->data.data(), n);
  };
  for (size_t c = 0; c < models_.size(); ++c) {
    const std::string suffix = c == 0 ? "" : ".chunk" + std::to_string(c);
    Gpt& g = *models_[c];  // ZeRO-3 checkpoints hold each rank's parameter shard
    if (g.params()) load("params" + suffix, g.params(), g.num_params());
    else load("params" + suffix, g.param_shard(), g.shard_numel());
    load("adam.m" + suffix, opts_[c]->m(), opts_[c]->state_numel());
    load("adam.v" + suffix, opts_[c]->v(), opts_[c]->state_numel());
    if (Optimizer* eo = expert_opts_[c].get()) {  // this rank's experts
      load("experts.params" + suffix, g.expert_params(), g.expert_numel());
      load("experts.adam.m" + suffix, eo->m(), eo->state_numel());
      load("experts.adam.v" + suffix, eo->v(), eo->state_numel());
    }
  }
  auto it = shard->meta.find("step");
  if (it == shard->meta.end()) d.error(path, 0, 0, "step", "missing");
  else start_step_ = std::stoll(it->second);
  return !d.has_errors();
}

bool Run::save_checkpoint(int64_t steps_done, std::string* error) {
  const Layout& L = o_.layout;
  KeyValues meta = {{"model", model_fingerprint(model_spec_, T_)},
                    {"dp", std::to_string(L.dp)},
                    {"tp", std::to_string(L.tp)},
                    {"pp", std::to_string(L.pp)},
                    {"zero", std::to_string(L.zero)},
                    {"vp", std::to_string(L.vp)},
                    {"world", std::to_string(world_)},
                    {"cp", std::to_string(L.cp)},
                    {"ep", std::to_string(L.ep)},
                    {"step", std::to_string(steps_done)},
                    {"data_position", std::to_string(steps_done * o_.gbs)},
                    {"rng", "none"}};
  for (const auto& [k, v] : training_meta(o_)) meta[k] = v;
  std::vector<std::vector<float>> host;
  std::vector<std::string> names;
  for (size_t c = 0; c < models_.size(); ++c) {
    const std::string suffix = c == 0 ? "" : ".chunk" + std::to_string(c);
    Gpt& g = *models_[c];
    Optimizer& op = *opts_[c];
    for (auto [name, src, count] :
         {g.params() ? std::tuple{"params", static_cast<const float*>(models_[c]->params()),
                                  g.num_params()}
                     : std::tuple{"params", static_cast<const float*>(models_[c]->param_shard()),
                                  g.shard_numel()},
          std::tuple{"adam.m", static_cast<const float*>(op.m()), op.state_numel()},
          std::tuple{"adam.v", static_cast<const float*>(op.v()), op.state_numel()}}) {
      host.emplace_back(size_t(count));
      be_->to_host(host.back().data(), src, count);
      names.push_back(name + suffix);
    }
    if (Optimizer* eo = expert_opts_[c].get())
      for (auto [name, src, count] :
           {std::tuple{"experts.params", static_cast<const float*>(g.expert_params()), g.expert_numel()},
            std::tuple{"experts.adam.m", static_cast<const float*>(eo->m()), eo->state_numel()},
            std::tuple{"experts.adam.v", static_cast<const float*>(eo->v()), eo->state_numel()}}) {
        host.emplace_back(size_t(count));
        be_->to_host(host.back().data(), src, count);
        names.push_back(name + suffix);
      }
  }
  std::vector<TensorView> views;
  for (size_t i = 0; i < host.size(); ++i)
    views.push_back({names[i], host[i].data(), int64_t(host[i].size())});
  bool ok = checkpoint_write_shard(o_.checkpoint_dir, steps_done, rank_, meta, views, error)
                .has_value();
  if (!all_ok(ok)) {
    if (ok) *error = "another rank failed to write its checkpoint shard";
    return false;
  }
  ok = true;
  if (rank_ == 0) {
    ok = checkpoint_write_manifest(o_.checkpoint_dir, steps_done, world_, meta, {}, error);
    if (ok) {
      std::vector<std::string> aside;
      checkpoint_retain(o_.checkpoint_dir, 3, &aside);
      for (const std::string& a : aside)
        std::fprintf(stderr, "warning: %s: a checkpoint that does not verify, moved aside (not deleted)\n",
                     a.c_str());
    }
  }
  if (!all_ok(ok)) {
    if (ok) *error = "rank 0 failed to write the checkpoint manifest";
    return false;
  }
  return true;
}

void Run::load_microbatch(int64_t step, int64_t mb) {
  const Layout& L = o_.layout;
  for (int i = 0; i < L.mbs; ++i) {
    const int64_t idx = global_sample_index(step, o_.gbs, L.dp, groups_.coords.dp, mb * L.mbs + i);
    data_->sample(idx, sample_.data());
    const int64_t base = int64_t(i) * int64_t(cp_pos_.size());
    for (size_t j = 0; j < cp_pos_.size(); ++j) {  // with cp: this rank's chunks only
      tokens_[size_t(base) + j] = sample_[size_t(cp_pos_[j])];
      targets_[size_t(base) + j] = sample_[size_t(cp_pos_[j]) + 1];
    }
  }
}

// The LM head on the last stage is tied to the first stage's embedding: both copies get the sum
// of the two gradients (a + b on one side, b + a on the other: the same float), so the two
// identical AdamW updates keep them bitwise equal.
Run::TiedEnd Run::tied_end() {
  const bool first = models_.front()->first_stage(), last = models_.back()->last_stage();
  if (o_.layout.pp == 1 || !(first || last)) return {};
  Gpt* g = first ? models_.front().get() : models_.back().get();
  return {g, g->find_param(first ? "wte" : "wte.tied"), first ? o_.layout.pp - 1 : 0};
}

// This end's gradient goes out as soon as its micro-batches are done: the last stage's long before
// the first stage's drain ends. Each end then takes the other's message itself (Open MPI's
// shared-memory transport reads it from the sender's memory), so neither waits for the other to
// get a core back after the drain, when the ranks that are through go on to their optimizer step
// on the shared cores. The send is waited for after the step's update (the buffer stays).
void Run::post_tied_gradient() {
  const TiedEnd e = tied_end();
  if (!e.param) return;
  tied_mine_.resize(size_t(e.param->numel));
  be_->to_host(tied_mine_.data(), e.model->grad_at(e.param->offset), e.param->numel);
  groups_.pp->send_async(tied_mine_.data(), e.param->numel, e.peer, 1 << 30);
}

void Run::sync_tied_embedding() {
  const TiedEnd e = tied_end();
  if (!e.param) return;
  tied_other_.resize(size_t(e.param->numel));
  // The peer's gradient comes when it has finished its own last backward: the wait for it is
  // the pipeline's drain on this stage (bubble), the receive that then moves it pp_comm.
  const double w = groups_.pp->comm_seconds();
  groups_.pp->probe(e.peer, 1 << 30);
  tied_wait_s_ += groups_.pp->comm_seconds() - w;
  groups_.pp->recv(tied_other_.data(), e.param->numel, e.peer, 1 << 30);
  for (size_t i = 0; i < tied_other_.size(); ++i) tied_other_[i] += tied_mine_[i];
  be_->from_host(e.model->grad_at(e.param->offset), tied_other_.data(), e.param->numel);
}

// --dump-grads: the step-1 gradients, summed over DP, un-sharded to the single-rank layout of
// every global tensor and written by rank 0 as text ("name count" then the values, %.9g).
// A testing aid: it all-reduces a copy of the gradients, so it does not change the run.
void Run::dump_gradients() {
  const Layout& L = o_.layout;
  const int tp = L.tp, r = groups_.coords.tp;
  const ModelSpec& m = model_spec_;
  const int C = m.hidden, H = m.heads, KV = m.kv_heads_or_default(), D = m.head_dim_or_default();
  const int F = m.ffn_hidden_or_default(), V = m.vocab;
  const int Hl = H / tp, KVl = KV / tp, Fl = F / tp, Vl = (V + tp - 1) / tp;
  const bool swiglu = m.ffn == Ffn::Swiglu;
  // Each rank scatters its shards into full-size tensors (zeros elsewhere); a world sum then
  // assembles them. Replicated tensors come from TP rank 0, DP rank 0 only.
  std::map<std::string, std::vector<double>> full;
  auto sizes = [&](const std::string& name) -> int64_t {
    if (name == "wte") return int64_t(V) * C;
    if (name == "wpe") return int64_t(T_) * C;
    if (name.find("wqkv") != std::string::npos) return int64_t(H + 2 * KV) * D * C;
    if (name.find("wo") != std::string::npos) return int64_t(C) * H * D;
    if (name.find("wfc") != std::string::npos) return int64_t(swiglu ? 2 : 1) * F * C;
    if (name.find("wproj") != std::string::npos) return int64_t(C) * F;
    return C;  // norms
  };
  for (int l = 0; l < m.layers; ++l)
    for (const char* t : {"ln1.w", "ln1.b", "wqkv", "wo", "ln2.w", "ln2.b", "wfc", "wproj"})
      full["layers." + std::to_string(l) + "." + t].assign(size_t(sizes(t)), 0.0);
  for (const char* t : {"wte", "wpe", "lnf.w", "lnf.b"}) full[t].assign(size_t(sizes(t)), 0.0);
  for (auto& model : models_) {
    std::vector<float> g(size_t(model->padded_params()));
    if (model->grad_shard()) {  // ZeRO-2/3: the shards hold the DP sums already
      std::vector<float> shard(size_t(model->shard_numel()));
      be_->to_host(shard.data(), model->grad_shard(), model->shard_numel());
      groups_.dp_cp->all_gather(shard.data(), g.data(), model->shard_numel());
    } else {
      be_->to_host(g.data(), model->grads(), model->num_params());
      groups_.dp_cp->all_reduce_sum(g.data(), model->num_params());
    }
    if (groups_.coords.dp != 0 || groups_.coords.cp != 0) continue;
    for (const ParamInfo& p : model->param_infos()) {
      if (p.name == "wte.tied" || (p.tp_replicated && r != 0)) continue;
      auto it = full.find(p.name);  // the dense model's tensors (not an MoE layer's)
      if (it == full.end()) continue;
      std::vector<double>& dst = it->second;
      const float* src = g.data() + p.offset;
      auto rows = [&](int64_t dst_row, int64_t src_row, int64_t n_rows, int64_t cols) {
        for (int64_t i = 0; i < n_rows * cols; ++i)
          dst[size_t(dst_row * cols + i)] = src[src_row * cols + i];
      };
      auto cols = [&](int64_t n_rows, int64_t full_cols, int64_t col0, int64_t n_cols) {
        for (int64_t i = 0; i < n_rows; ++i)
          for (int64_t j = 0; j < n_cols; ++j)
            dst[size_t(i * full_cols + col0 + j)] = src[i * n_cols + j];
      };
      const std::string& n = p.name;
      if (p.tp_replicated) {
        rows(0, 0, 1, p.numel);
      } else if (n == "wte") {
        rows(int64_t(r) * Vl, 0, std::max(0, std::min(Vl, V - r * Vl)), C);
      } else if (n.find("wqkv") != std::string::npos) {
        rows(int64_t(r) * Hl * D, 0, int64_t(Hl) * D, C);
        rows(int64_t(H) * D + int64_t(r) * KVl * D, int64_t(Hl) * D, int64_t(KVl) * D, C);
        rows(int64_t(H + KV) * D + int64_t(r) * KVl * D, int64_t(Hl + KVl) * D, int64_t(KVl) * D, C);
      } else if (n.find("wo") != std::string::npos) {
        cols(C, int64_t(H) * D, int64_t(r) * Hl * D, int64_t(Hl) * D);
      } else if (n.find("wfc") != std::string::npos) {
        rows(int64_t(r) * Fl, 0, Fl, C);
        if (swiglu) rows(F + int64_t(r) * Fl, Fl, Fl, C);
      } else if (n.find("wproj") != std::string::npos) {
        cols(C, F, int64_t(r) * Fl, Fl);
      }
    }
  }
  std::string out;
  for (auto& [name, v] : full) {
    groups_.world->all_reduce_sum(v.data(), int64_t(v.size()));
    if (rank_ != 0) continue;
    out += name + " " + std::to_string(v.size()) + "\n";
    char buf[32];
    for (double x : v) {
      std::snprintf(buf, sizeof(buf), "%.9g\n", x);
      out += buf;
    }
  }
  if (rank_ == 0) {
    std::FILE* f = std::fopen(o_.dump_grads.c_str(), "w");
    if (f) {
      std::fwrite(out.data(), 1, out.size(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "warning: --dump-grads: cannot write %s\n", o_.dump_grads.c_str());
    }
  }
}

// The micro-batches of a step with the batch split over threads (split_ > 1, so one stage, no
// TP, ZeRO <= 1): each part's forward and backward run as one task per part, the parts' losses
// and gradients are summed in part order (the result depends on split_, not on timing). Returns
// the sum of the token losses; the gradients end in models_[0].
//
// The parts do the same work, but the cores do not run at the same speed (here one of the two
// is often ~5 % slower for seconds at a time), so a part that finishes first would wait. Each
// part therefore leaves the weight-gradient GEMMs of its LM head's last chunk and of its first
// layer in a list (on the benchmark's shape 1.9 of its 13.5 GFLOP: 2 * 512 * 4096 * 256 for the
// head, 2 * 512 * 12 * 256^2 for the layer), and a thread that is done with its own part takes
// over any part's listed GEMMs that nobody has started. Each GEMM still adds into its own part's
// gradients, on one thread, so which thread runs it changes nothing in the result.
double Run::run_split_microbatches(int64_t step, StepRecord& rec) {
  const int64_t part_tokens = int64_t(o_.layout.mbs / split_) * T_;
  const float scale = float(loss_scale_ / (double(o_.gbs) * T_));
  std::vector<double> loss(static_cast<size_t>(split_), 0.0);
  std::vector<std::exception_ptr> failed(static_cast<size_t>(split_));
  auto part = [&](int r) -> Gpt& { return r == 0 ? *models_[0] : *parts_[size_t(r) - 1]; };
  double wait_s = 0;
  for (int64_t mb = 0; mb < micro_; ++mb) {
    auto t = Clock::now();
    load_microbatch(step, mb);
    rec.data_s += seconds_since(t);
    t = Clock::now();
    double forward0 = 0;  // part 0's forward, on this thread
    std::vector<double> busy(static_cast<size_t>(split_));  // each thread's time not waiting
    // Per part: whether its list is ready, and the next entry of it to take.
    std::vector<std::atomic<bool>> listed(static_cast<size_t>(split_));
    std::vector<std::atomic<size_t>> next(static_cast<size_t>(split_));
    std::atomic<int> open(split_);  // parts still running their own forward and backward
    be_->run_tasks(split_, [&](int r) {
      const auto t_task = Clock::now();
      double waited = 0;
      try {
        Gpt& g = part(r);
        if (mb == 0) g.zero_grads();
        const auto t0 = Clock::now();
        loss[size_t(r)] += g.forward(0, tokens_.data() + r * part_tokens, nullptr, nullptr,
                                     targets_.data() + r * part_tokens, scale);
        if (r == 0) forward0 = seconds_since(t0);
        g.backward(0, nullptr, nullptr);
      } catch (...) {
        failed[size_t(r)] = std::current_exception();
      }
      listed[size_t(r)].store(true, std::memory_order_release);
      open.fetch_sub(1, std::memory_order_acq_rel);
      // Own list first, then the others' as they appear, until every list is taken.
      auto take_listed = [&](int q) {
        const std::vector<DeferredGemm>& list = part(q).deferred();
        for (size_t i; (i = next[size_t(q)].fetch_add(1)) < list.size();) {
          list[i].run(*part_be_[size_t(r)]);
        }
      };
      for (;;) {
        const bool pending = open.load(std::memory_order_acquire) > 0;
        for (int k = 0; k < split_; ++k)
          if (listed[size_t((r + k) % split_)].load(std::memory_order_acquire))
            take_listed((r + k) % split_);
        if (!pending) break;
        const auto w = Clock::now();
        std::this_thread::yield();
        waited += seconds_since(w);
      }
      busy[size_t(r)] = seconds_since(t_task) - waited;
    });
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
    const double wall = seconds_since(t);
    rec.forward_s += forward0;
    rec.backward_s += wall - forward0;
    double mean_busy = 0;
    for (double b : busy) mean_busy += b / split_;
    wait_s += std::max(0.0, wall - mean_busy);
  }
  rec.split_wait_s = wait_s;
  const auto t = Clock::now();
  Gpt& g0 = *models_[0];
  for (const auto& p : parts_) be_->add(g0.grads(), p->grads(), g0.num_params());
  rec.backward_s += seconds_since(t);
  double sum = 0;
  for (double l : loss) sum += l;
  return sum;
}

// The micro-batches of a step in the order of this stage's schedule table (split_ == 1),
// activations and their gradients to and from the neighbouring stages. Returns the sum of the
// token losses (last stage); adds the time spent waiting for a neighbour's message to arrive
// to *pp_wait_s (the receive that then moves it is pipeline communication).
double Run::run_schedule(int64_t step, StepRecord& rec, double* pp_wait_s) {
  const Layout& L = o_.layout;
  for (auto& m : models_) m->zero_grads();
  const float scale = float(loss_scale_ / (double(o_.gbs) * T_));
  const int64_t n = models_[0]->boundary_numel();
  const int pp = L.pp, stage = groups_.coords.pp, vstages = L.pp * L.vp;
  const int prev = (stage - 1 + pp) % pp, next = (stage + 1) % pp;
  // A message's tag names the micro-batch, the sending virtual stage and the direction.
  auto tag = [&](int64_t mb, int v, int dir) { return int((mb * vstages + v) * 2 + dir); };
  std::vector<std::vector<int>> slot_of(size_t(L.vp), std::vector<int>(size_t(micro_), -1));
  std::vector<std::vector<int>> free_slots(size_t(L.vp));
  for (int c = 0; c < L.vp; ++c)
    for (int i = models_[size_t(c)]->config().slots - 1; i >= 0; --i)
      free_slots[size_t(c)].push_back(i);
  double loss_sum = 0;
  for (const PipelineAction& a : actions_) {
    const int64_t mb = a.microbatch;
    const size_t c = size_t(a.chunk);
    Gpt& g = *models_[c];
    const int v = a.chunk * pp + stage;
    const bool first = g.first_stage(), last = g.last_stage();
    if (a.pass == Pass::Forward) {
      auto t = Clock::now();
      if (first || last) load_microbatch(step, mb);
      rec.data_s += seconds_since(t);
      t = Clock::now();
      const int slot = free_slots[c].back();
      free_slots[c].pop_back();
      slot_of[c][size_t(mb)] = slot;
      if (!first) {
        const double w = groups_.pp->comm_seconds();
        groups_.pp->probe(prev, tag(mb, v - 1, 0));
        *pp_wait_s += groups_.pp->comm_seconds() - w;
        groups_.pp->recv(recv_fwd_, n, prev, tag(mb, v - 1, 0));
      }
      float* out = last ? nullptr : send_fwd_[c][size_t(mb)];
      loss_sum += g.forward(slot, tokens_.data(), recv_fwd_, out, targets_.data(), scale);
      if (!last) groups_.pp->send_async(out, n, next, tag(mb, v, 0));
      rec.forward_s += seconds_since(t);
    } else {
      const auto t = Clock::now();
      if (!last) {
        const double w = groups_.pp->comm_seconds();
        groups_.pp->probe(next, tag(mb, v + 1, 1));
        *pp_wait_s += groups_.pp->comm_seconds() - w;
        groups_.pp->recv(recv_bwd_, n, next, tag(mb, v + 1, 1));
      }
      float* din = first ? nullptr : send_bwd_[c][size_t(mb)];
      g.backward(slot_of[c][size_t(mb)], recv_bwd_, din);
      if (!first) groups_.pp->send_async(din, n, prev, tag(mb, v, 1));
      free_slots[c].push_back(slot_of[c][size_t(mb)]);
      rec.backward_s += seconds_since(t);
    }
  }
  return loss_sum;
}

// The optimizers' updates of one step, with fp16's dynamic loss scale: an overflow (a non-finite
// gradient norm `total`) skips the update and halves the scale.
void Run::apply_updates(int64_t step, double total, OptimizerStats& os) {
  if (dynamic_loss_scale_ && !std::isfinite(total)) {
    // fp16: the scaled gradients overflowed; skip this update and halve the scale (the loss is
    // still reported; the step counts as taken).
    loss_scale_ /= 2;
    good_steps_ = 0;
    if (rank_ == 0) std::printf("fp16: gradients overflowed at step %lld, loss scale now %g, update skipped\n",
                                (long long)step + 1, loss_scale_);
  } else {
    for (auto& op : opts_) op->set_loss_scale(loss_scale_);
    for (auto& op : opts_) op->update(step, os.grad_norm, &os.comm_s);
    for (auto& op : expert_opts_)
      if (op) {
        op->set_loss_scale(loss_scale_);
        op->update(step, os.grad_norm, &os.comm_s);
      }
    // Double the scale after 1000 steps without overflow (as PyTorch's GradScaler).
    if (dynamic_loss_scale_ && ++good_steps_ == 1000) {
      loss_scale_ *= 2;
      good_steps_ = 0;
    }
  }
}

// One optimizer step, timed by term: every term is a wall-clock interval of this rank or a
// difference of the communicators' and the model's own counters over it, so that
//   step = compute + recompute + tp_comm + pp_comm + bubble + dp_comm + ep_comm + cp_comm
//          + optimizer + offload + data + remainder
// holds for each step record. The pipeline's waits for a neighbour (a message not yet arrived,
// the step's last sends not yet taken, the tied embedding's gradient from the other end and the
// stages' sum of the gradient norm, each a wait for another stage's drain) are its bubble; moving
// the messages is pp_comm. The record takes the terms of the busiest rank (below).
// The remainder is what none of them covers (the loss sum over the world, timing).
void Run::run_step(int64_t step, StepRecord& rec) {
  const Layout& L = o_.layout;
  // Gradients (and ZeRO's gathers) go over dp_cp, the experts' over edp: both are dp_comm.
  auto dp_comm = [&] {
    return groups_.dp->comm_seconds() + groups_.dp_cp->comm_seconds() + groups_.edp->comm_seconds();
  };
  auto comm_s = [&] {
    return groups_.tp->comm_seconds() + groups_.pp->comm_seconds() + dp_comm() + groups_.ep->comm_seconds() +
           groups_.cp->comm_seconds();
  };
  auto model_s = [&](double (Gpt::*counter)() const) {
    double sum = 0;
    for (auto& m : models_) sum += (*m.*counter)();
    return sum;
  };
  const double tp0 = groups_.tp->comm_seconds(), pp0 = groups_.pp->comm_seconds();
  const double dp0 = dp_comm(), ep0 = groups_.ep->comm_seconds(), cp0 = groups_.cp->comm_seconds();
  const double recompute0 = model_s(&Gpt::recompute_seconds), offload0 = model_s(&Gpt::offload_seconds);
  const auto t_step = Clock::now();
  const double gemm0 = model_backend().gemm_seconds();
  double pp_wait_s = 0;
  const double comm_pipe0 = comm_s();
  const auto t_pipe = Clock::now();
  const double loss_sum =
      split_ > 1 ? run_split_microbatches(step, rec) : run_schedule(step, rec, &pp_wait_s);
  const double sends0 = groups_.pp->comm_seconds();
  groups_.pp->wait_sends();
  const double sends_wait_s = groups_.pp->comm_seconds() - sends0;
  // Measured pipeline bubble: the share of the micro-batch phase this rank spent waiting for
  // its neighbours (mean over ranks), to set beside (p - 1) / (m + p - 1) for 1F1B / GPipe.
  const double pipe_s = seconds_since(t_pipe);
  double bubble = pipe_s > 0 ? pp_wait_s / pipe_s : 0.0;
  double bubble_s = pp_wait_s + sends_wait_s;  // waits inside the pp group's calls
  const auto t_post = Clock::now();
  post_tied_gradient();
  const double post_s = seconds_since(t_post);  // the gradient's copy out, in the backward
  double drain_s = 0;  // the wait in the world's sum below
  if (L.pp > 1) {
    // Every rank waits here for the last stage to end its micro-batches (stage 0's last
    // backward): on the others that is the pipeline's drain, so it is bubble.
    const auto t_sum = Clock::now();
    groups_.world->all_reduce_sum(&bubble, 1);
    drain_s = seconds_since(t_sum);
  }
  bubble_ = bubble / world_;
  rec.bubble_fraction = L.pp > 1 ? bubble_ : std::numeric_limits<double>::quiet_NaN();
  auto t = Clock::now();
  for (auto& m : models_) m->finish_backward();
  tied_wait_s_ = 0;
  sync_tied_embedding();
  for (auto& m : models_) m->flush_gradients();
  if (step == 0 && !o_.dump_grads.empty()) dump_gradients();
  rec.backward_s += seconds_since(t) + sends_wait_s + post_s;  // (the pipeline's last sends, waited for)
  // Forward and backward, as walls, and the communication inside them.
  const double fwd_bwd_s = pipe_s + post_s + seconds_since(t);
  const double comm_fwd_bwd_s = comm_s() - comm_pipe0;
  t = Clock::now();
  const double comm_opt0 = comm_s();
  // Global gradient norm over chunks, then TP and PP; clipping uses it on every chunk.
  OptimizerStats os;
  double total = 0;
  for (auto& op : opts_) total += op->reduce_gradients(&os.comm_s);
  if (moe_) {  // each ep rank holds other experts: their squares are summed over the ep group
    double experts = 0;
    for (auto& op : expert_opts_)
      if (op) experts += op->reduce_gradients(&os.comm_s);
    groups_.ep->all_reduce_sum(&experts, 1);
    total += experts;
  }
  groups_.tp->all_reduce_sum(&total, 1);
  // The stages' sum: every stage waits here for the last one to finish its drain (a middle
  // stage has no tied embedding to wait for), which is the pipeline's bubble, not a transfer.
  const double norm0 = groups_.pp->comm_seconds();
  groups_.pp->all_reduce_sum(&total, 1);
  const double norm_wait_s = groups_.pp->comm_seconds() - norm0;
  os.grad_norm = std::sqrt(total) / loss_scale_;
  os.lr = learning_rate(o_.optimizer, step);
  apply_updates(step, total, os);
  rec.optimizer_s = seconds_since(t) - (comm_s() - comm_opt0);
  groups_.pp->wait_sends();  // the tied gradient's send, long taken by now (pp_comm)
  const bool last = models_.back()->last_stage();
  // Global mean loss: the last stage's TP rank 0 of every DP rank contributes its sum.
  double contrib = (last && groups_.coords.tp == 0) ? loss_sum : 0.0;
  groups_.world->all_reduce_sum(&contrib, 1);
  rec.step = step + 1;
  rec.loss = contrib / (double(o_.gbs) * T_);
  if (moe_) sum_expert_stats();
  rec.lr = os.lr;
  rec.grad_norm = os.grad_norm;
  rec.step_time_s = seconds_since(t_step);
  rec.gemm_s = model_backend().gemm_seconds() - gemm0;
  rec.tp_comm_s = groups_.tp->comm_seconds() - tp0;
  rec.dp_comm_s = dp_comm() - dp0;
  rec.ep_comm_s = groups_.ep->comm_seconds() - ep0;
  rec.cp_comm_s = groups_.cp->comm_seconds() - cp0;
  bubble_s += tied_wait_s_ + norm_wait_s;
  rec.bubble_s = bubble_s + drain_s;
  rec.pp_comm_s = groups_.pp->comm_seconds() - pp0 - bubble_s;
  rec.recompute_s = model_s(&Gpt::recompute_seconds) - recompute0;
  rec.offload_s = model_s(&Gpt::offload_seconds) - offload0;
  rec.compute_s = fwd_bwd_s - comm_fwd_bwd_s - rec.data_s - rec.recompute_s - rec.offload_s;
  rec.remainder_s = rec.step_time_s - (rec.compute_s + rec.recompute_s + rec.tp_comm_s + rec.pp_comm_s +
                                       rec.bubble_s + rec.dp_comm_s + rec.ep_comm_s + rec.cp_comm_s +
                                       rec.optimizer_s + rec.offload_s + rec.data_s);
  rec.tokens_per_s = double(o_.gbs) * T_ / rec.step_time_s;
  const double flops =
      model_flops_per_token(active_params_, model_spec_.layers, T_, model_spec_.attention_width()) *
      double(o_.gbs) * T_;
  rec.model_flops_per_s = flops / rec.step_time_s / world_;
  rec.mfu = peak_.flops_per_s > 0 ? rec.model_flops_per_s / peak_.flops_per_s
                                  : std::numeric_limits<double>::quiet_NaN();
  rec.peak_flops_source = peak_.source;
  take_terms_of_busiest_rank(rec);
}

// MoE: the step's load-balancing loss and dropped token choices over the world. Every tp and cp
// rank of a stage computes the same loss; each rank drops its own tokens' choices.
void Run::sum_expert_stats() {
  double v[2] = {0, 0};  // aux loss; dropped choices
  for (auto& m : models_) {
    if (groups_.coords.tp == 0 && groups_.coords.cp == 0) v[0] += m->aux_loss();
    if (groups_.coords.tp == 0) v[1] += double(m->dropped());
  }
  groups_.world->all_reduce_sum(v, 2);
  aux_loss_ = v[0];
  dropped_ = int64_t(v[1]);
}

// The record's terms are those of the rank with the most compute (compute + recompute + offload;
// the lowest such rank on a tie), so that they describe the step's critical path as the
// prediction's describe the pacing stage: a pipeline's lighter stages, and a data- or
// tensor-parallel rank that arrives early at a collective, spend the difference waiting. Every
// rank's terms are gathered to every rank (a sum over the world of one row per rank, after the
// step's timed interval); the chosen rank's step time comes with its terms, so that they add up.
void Run::take_terms_of_busiest_rank(StepRecord& rec) {
  if (world_ == 1) return;
  double StepRecord::*const fields[] = {&StepRecord::step_time_s, &StepRecord::forward_s,  &StepRecord::backward_s,
                                        &StepRecord::compute_s,   &StepRecord::recompute_s, &StepRecord::tp_comm_s,
                                        &StepRecord::pp_comm_s,   &StepRecord::bubble_s,    &StepRecord::dp_comm_s,
                                        &StepRecord::optimizer_s, &StepRecord::offload_s,   &StepRecord::data_s,
                                        &StepRecord::remainder_s, &StepRecord::ep_comm_s,   &StepRecord::cp_comm_s,
                                        &StepRecord::gemm_s};
  constexpr size_t K = sizeof(fields) / sizeof(fields[0]);
  std::vector<double> rows(size_t(world_) * K, 0.0);
  for (size_t k = 0; k < K; ++k) rows[size_t(rank_) * K + k] = rec.*fields[k];
  groups_.world->all_reduce_sum(rows.data(), int64_t(rows.size()));
  int busiest = 0;
  auto busy = [&](int r) {
    const double* row = &rows[size_t(r) * K];
    return row[3] + row[4] + row[10];  // compute, recompute, offload
  };
  for (int r = 1; r < world_; ++r)
    if (busy(r) > busy(busiest)) busiest = r;
  for (size_t k = 0; k < K; ++k) rec.*fields[k] = rows[size_t(busiest) * K + k];
  rec.terms_rank = busiest;
  rec.tokens_per_s = double(o_.gbs) * T_ / rec.step_time_s;
  const double flops =
      model_flops_per_token(active_params_, model_spec_.layers, T_, model_spec_.attention_width()) * double(o_.gbs) * T_;
  rec.model_flops_per_s = flops / rec.step_time_s / world_;
  rec.mfu = peak_.flops_per_s > 0 ? rec.model_flops_per_s / peak_.flops_per_s
                                  : std::numeric_limits<double>::quiet_NaN();
}

int Run::execute() {
  Diagnostics d;
  bool ok = false;
  try {
    ok = setup(d);
  } catch (const std::exception& e) {
    d.error(kCmd, 0, 0, "", std::string("setup failed: ") + e.what());
  }
  if (!all_ok(ok)) {
    report_diagnostics(d, rank_);
    return 2;
  }
  if (!check_initial_weights()) return 1;
  try {
    ok = resume(d);
  } catch (const std::exception& e) {
    d.error(kCmd, 0, 0, "--resume", std::string("reading the checkpoint failed: ") + e.what());
    ok = false;
  }
  if (!all_ok(ok)) {
    report_diagnostics(d, rank_);
    return 2;
  }
  if (rank_ == 0 && !d.empty()) std::fprintf(stderr, "%s", d.to_string().c_str());
  if (!o_.metrics.empty() && !open_metrics()) return 2;
  announce(report_ranks());

  const auto t_run = Clock::now();
  SummaryRecord summary;
  const std::string failure = train_steps(summary);
  if (sampler_) sampler_->stop();
  summary.wall_s = seconds_since(t_run);
  if (!failure.empty()) {
    summary.status = "failed";
    summary.reason = failure;
  }
  if (rank_ == 0 && metrics_.is_open()) metrics_.write_summary(summary);
  return failure.empty() ? 0 : 1;
}

// Identical initialisation from the seed makes rank 0's broadcast a check: every DP replica
// (same pp/tp coordinates) must hold the same bytes. Also counts the model's parameters.
bool Run::check_initial_weights() {
  uint64_t h = 1469598103934665603ull;
  for (auto& m : models_) {
    std::vector<float> host(size_t(m->padded_params()));
    if (m->params()) {
      be_->to_host(host.data(), m->params(), m->num_params());
    } else {  // ZeRO-3: the replicas' shards put together
      std::vector<float> shard(size_t(m->shard_numel()));
      be_->to_host(shard.data(), m->param_shard(), m->shard_numel());
      groups_.dp_cp->all_gather(shard.data(), host.data(), m->shard_numel());
    }
    h = fnv1a(host.data(), size_t(m->num_params()) * sizeof(float), h);
  }
  // Only DP replicas hold the same tensors; TP and PP ranks hold different parts.
  int64_t w[2] = {int64_t(h >> 1), -int64_t(h >> 1)};
  groups_.dp_cp->all_reduce_min(w, 2);
  if (!all_ok(w[0] == -w[1])) {
    if (rank_ == 0) std::fprintf(stderr, "error: initial weights differ between DP replicas\n");
    return false;
  }
  // Dense tensors are replicated over dp x cp; the experts are spread over ep of those ranks.
  double c[2] = {0, 0};
  for (auto& m : models_) {
    for (const ParamInfo& p : m->param_infos())
      if (p.norm_counted) c[0] += double(p.numel);
    for (const ParamInfo& p : m->expert_infos()) c[1] += double(p.numel);
  }
  groups_.world->all_reduce_sum(c, 2);
  const double dpcp = double(o_.layout.dp) * o_.layout.cp;
  const double experts = c[1] * o_.layout.ep / dpcp;
  global_params_ = int64_t(c[0] / dpcp + experts);
  // A token goes through top_k of the experts: the model FLOPs count those (6 N per token).
  const MoeSpec& moe = model_spec_.moe;
  active_params_ = int64_t(c[0] / dpcp +
                           (moe.enabled() ? experts * moe.top_k_or_default() / moe.experts : 0.0));
  return true;
}

// The peak the MFU is measured against, the metrics file (a resumed run appends, so the file
// keeps the whole history; the report takes each step from the newest run) and the sampler.
bool Run::open_metrics() {
  if (be_->name() == "cuda") {  // the catalog's dense peak for the detected GPU, or unknown
    const CudaDeviceInfo dev = cuda_device_info(groups_.local_rank);
    const std::string prec = !o_.precision.empty() ? o_.precision : dev.bf16 ? "bf16" : "fp16";
    peak_ = catalog_peak_for_device(dev.name, dev.memory_bytes / 1073741824.0, prec);
  } else {
    peak_ = measure_peak_flops(
        [&](int m, int n, int k, const float* a, const float* b, float* c) {
          be_->matmul(c, a, b, m, n, k, false, false, false);
        },
        1024, 3, threads_);
  }
  std::string error;
  const bool ok = rank_ != 0 || metrics_.open(o_.metrics, &error, start_step_ > 0);
  if (!all_ok(ok)) {
    if (rank_ == 0) std::fprintf(stderr, "%s: error: --metrics: %s\n", o_.metrics.c_str(), error.c_str());
    return false;
  }
  sampler_ = std::make_unique<SystemSampler>(rank_, threads_);
  sampler_->start();
  if (be_->name() != "cuda" && world_ > 1) core_probe_ = std::make_unique<CoreLatencyProbe>();
  return true;
}

Run::RankReport Run::report_ranks() {
  RankReport out;
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  const std::string host(name, size_t(len));
  out.hosts = gather_lines({host}, rank_, world_);
  const RankCoords& c = groups_.coords;
  int64_t param_bytes = 0, grad_bytes = 0, param_buf = 0, grad_buf = 0, state_bytes = 0, act_bytes = 0,
          host_act_bytes = 0, split_grad_bytes = 0, working_bytes = 0;
  for (size_t k = 0; k < models_.size(); ++k) {
    param_bytes += models_[k]->param_bytes();
    grad_bytes += models_[k]->grad_bytes();
    param_buf += models_[k]->param_buffer_bytes();
    grad_buf += models_[k]->grad_buffer_bytes();
    state_bytes += opts_[k]->state_bytes();
    act_bytes += models_[k]->activation_bytes();
    host_act_bytes += models_[k]->host_activation_bytes();
    working_bytes += models_[k]->working_bytes();
  }
  // Batch split: the other parts' gradient copies apart (the layout's memory has one), their
  // activations with the first part's (together, those of one whole micro-batch).
  for (const auto& p : parts_) {
    split_grad_bytes += p->grad_bytes();
    act_bytes += p->activation_bytes();
    host_act_bytes += p->host_activation_bytes();
    working_bytes += p->working_bytes();
  }
  namespace k = metrics_schema;
  Json record;
  record[k::kType] = k::kPlacement;
  record[k::kRank] = rank_;
  record[k::kHost] = host;
  record[k::kLocalRank] = groups_.local_rank;
  record[k::kDp] = c.dp;
  record[k::kPp] = c.pp;
  record[k::kTp] = c.tp;
  record[k::kParamBytes] = param_bytes;
  record[k::kGradBytes] = grad_bytes;
  record[k::kBuffersBytes] = param_buf + grad_buf;
  record[k::kOptimizerBytes] = state_bytes;
  record[k::kActivationDeviceBytes] = act_bytes;
  record[k::kActivationHostBytes] = host_act_bytes;
  record[k::kActivationWorkingBytes] = working_bytes;
  record[k::kSplitGradBytes] = split_grad_bytes;
  out.placement = gather_lines({json_dump(record, false)}, rank_, world_);
  char line[600], split_extra[120] = "";
  const double mib = 1024.0 * 1024.0;
  if (split_ > 1)
    std::snprintf(split_extra, sizeof(split_extra), ", + %.4f MiB of gradients for the other parts of the batch split",
                  split_grad_bytes / mib);
  // ZeRO-2/3: parameters and gradients are the shards; the buffers (one gathered layer and
  // one gradient bucket, plus the embedding and final norm) are counted apart, as the planner's
  // memory model counts ZeRO-3's gathered layers among its buffers.
  std::snprintf(line, sizeof(line),
                "rank %d (d%d,p%d,t%d): parameters %.4f MiB, gradients %.4f MiB, optimizer state "
                "%.4f MiB, ZeRO buffers %.4f MiB (gathered weights %.4f + gradient buckets "
                "%.4f), activations %.2f MiB in the device pool + %.2f MiB of working buffers + %.2f MiB "
                "offloaded to host%s",
                rank_, c.dp, c.pp, c.tp, param_bytes / mib, grad_bytes / mib, state_bytes / mib,
                (param_buf + grad_buf) / mib, param_buf / mib, grad_buf / mib, act_bytes / mib, working_bytes / mib,
                host_act_bytes / mib, split_extra);
  out.memory = gather_lines({line}, rank_, world_);
  return out;
}

// Rank 0: the run's summary line, memory and placement on stdout, the start and placement
// records in the metrics file.
void Run::announce(const RankReport& report) {
  if (rank_ != 0) return;
  const Layout& L = o_.layout;
  std::printf("capplan-train: %s, %lld parameters, layout dp %d tp %d pp %d cp %d ep %d (order %s), zero %d, "
              "mbs %d, gbs %lld (%lld micro-batches per rank), seq %d, %d threads per rank "
              "(%s), backend %s, data %s\n",
              model_spec_.name.c_str(), (long long)global_params_, L.dp, L.tp, L.pp, L.cp, L.ep,
              full_order(L.order).c_str(), L.zero, L.mbs,
              (long long)o_.gbs, (long long)micro_, T_, threads_, thread_split_text().c_str(), backend_text().c_str(),
              data_->describe().c_str());
  std::printf("memory per rank (allocated once, so also the peak):\n");
  for (const std::string& l : report.memory) std::printf("  %s\n", l.c_str());
  std::printf("placement (order %s, right-most fastest):", full_order(L.order).c_str());
  for (int r = 0; r < world_; ++r) {
    const RankCoords c = rank_to_coords(r, L);
    std::printf(" %d=(d%d,p%d,t%d", r, c.dp, c.pp, c.tp);
    if (L.cp > 1) std::printf(",c%d", c.cp);
    if (L.ep > 1) std::printf(",e%d", c.ep);
    std::printf(")");
  }
  std::printf("\n");
  if (start_step_ > 0) std::printf("resumed from step %lld\n", (long long)start_step_);
  std::fflush(stdout);
  if (!metrics_.is_open()) return;
  StartRecord s;
  s.model = model_spec_.name;
  s.parameters = global_params_;
  s.world = world_;
  s.dp = L.dp;
  s.tp = L.tp;
  s.pp = L.pp;
  s.zero = L.zero;
  s.mbs = L.mbs;
  s.gbs = o_.gbs;
  s.seq_len = T_;
  s.threads = threads_;
  s.batch_split = split_;
  s.backend = backend_text();
  s.rank_hosts = report.hosts;
  s.peak_flops_per_s = peak_.flops_per_s;
  s.peak_flops_source = peak_.source;
  s.resumed_from_step = start_step_ > 0 ? start_step_ : -1;
  metrics_.write_start(s);
  for (const std::string& line : report.placement) metrics_.write_line(line);
}

// The steps from start_step_ to o_.steps, each printed and recorded, with the checkpoints that
// fall due and the fault injection of --kill-at-step; returns why training stopped early (empty
// when it did not).
std::string Run::train_steps(SummaryRecord& summary) {
  double tokens_per_s_sum = 0;
  std::string failure;
  for (int64_t step = start_step_; step < o_.steps; ++step) {
    StepRecord rec;
    run_step(step, rec);
    if (core_probe_) rec.core_latency_ns = core_probe_->measure_ns();
    summary.steps += 1;
    summary.final_loss = rec.loss;
    tokens_per_s_sum += rec.tokens_per_s;
    if (rank_ == 0) {
      std::printf("step %lld/%lld loss %.17g lr %.6e grad_norm %.6g step_s %.4f tokens/s %.1f", (long long)rec.step,
                  (long long)o_.steps, rec.loss, rec.lr, rec.grad_norm, rec.step_time_s, rec.tokens_per_s);
      if (o_.layout.pp > 1) std::printf(" bubble %.3f", bubble_);
      if (moe_) std::printf(" aux_loss %.9g dropped %lld", aux_loss_, (long long)dropped_);
      std::printf("\n");
      std::fflush(stdout);
      if (metrics_.is_open()) metrics_.write_step(rec);
    }
    if (sampler_) {
      std::vector<std::string> lines = gather_lines(sampler_->drain(), rank_, world_);
      if (rank_ == 0)
        for (const auto& l : lines) metrics_.write_line(l);
    }
    if (!std::isfinite(rec.loss)) {
      failure = "non-finite loss at step " + std::to_string(step + 1);
      if (rank_ == 0) std::fprintf(stderr, "error: %s; stopping\n", failure.c_str());
      break;
    }
    const int64_t done = step + 1;
    const bool due = !o_.checkpoint_dir.empty() &&
                     ((o_.checkpoint_every > 0 && done % o_.checkpoint_every == 0) || done == o_.steps);
    if (due) {
      std::string error;
      if (!save_checkpoint(done, &error)) {
        failure = "checkpoint at step " + std::to_string(done) + " failed: " + error;
        if (rank_ == 0) std::fprintf(stderr, "error: %s\n", failure.c_str());
        break;
      }
    }
    if (o_.kill_at_step > 0 && done == o_.kill_at_step && rank_ == world_ - 1) {
      std::fprintf(stderr, "rank %d: killing itself after step %lld (--kill-at-step)\n", rank_, (long long)done);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
  }
  summary.mean_tokens_per_s = summary.steps > 0 ? tokens_per_s_sum / summary.steps : 0;
  return failure;
}

}  // namespace

int train_main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const int rank = world_rank(), world = world_size();
  TrainOptions o;
  Diagnostics d = TrainOptions::parse(argc, argv, &o);
  // Every rank must run the same command line.
  uint64_t h = 1469598103934665603ull;
  for (int i = 1; i < argc; ++i) h = fnv1a(argv[i], std::strlen(argv[i]) + 1, h);
  if (!same_everywhere(h))
    d.error(kCmd, 0, 0, "", "the ranks were started with different flags",
            "start every rank with the same capplan-train command line");
  int status = 0;
  if (!all_ok(!d.has_errors())) {
    report_diagnostics(d, rank);
    status = 2;
  } else {
    if (rank == 0 && !d.empty()) std::fprintf(stderr, "%s", d.to_string().c_str());
    try {
      Run run(o, rank, world);
      status = run.execute();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return status;
}

}  // namespace capplan::rt
