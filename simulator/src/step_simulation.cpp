// Step simulation (step_simulation.h). A task graph is built from the schedule tables
// (planner/schedule.h) and the per-task costs (planner/cost_model.h), then run by a
// discrete-event loop: a task starts when its dependencies are done and, on an ordered stream
// (compute, comm, PCIe), when the tasks queued before it are done, like a CUDA stream.
// Contention: the cost model prices a collective as if every GPU of a node ran one of the same
// kind at once (placement.cpp: a DP group gets NIC * per_node / gpus_per_node), and each kind
// alone. A simulated transfer therefore carries its `demand` on each link it crosses: the
// fraction of the link its copies on that node (the stage's GPUs there) use at the priced rate
// (GPUs of the stage on the node / gpus_per_node for a NIC, 1 for a GPU's own NVLink port).
// While the demands of the transfers active on a link sum to D > 1, each runs at 1/D of its
// priced rate (proportional sharing); it never runs faster than priced. So DP buckets of stages
// sharing a node, which the cost model already priced as concurrent, do not slow each other,
// but a DP bucket and a pipeline send on the same NIC at the same time do.
#include "simulator/step_simulation.h"

#include "planner/limits.h"
#include "planner/rank_mapping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>

#include "planner/schedule.h"

namespace capplan {

const char* to_string(SimStream s) {
  switch (s) {
    case SimStream::Compute: return "compute";
    case SimStream::Comm: return "comm";
    case SimStream::SendNext: return "send-next";
    case SimStream::SendPrev: return "send-prev";
    case SimStream::Pcie: return "pcie";
    case SimStream::Gather: return "zero-gather";
    case SimStream::Ring: return "cp-ring";
  }
  return "?";
}

const char* to_string(SimTaskKind k) {
  switch (k) {
    case SimTaskKind::Forward: return "forward";
    case SimTaskKind::Recompute: return "recompute";
    case SimTaskKind::BackwardInput: return "backward-input";
    case SimTaskKind::BackwardWeight: return "backward-weight";
    case SimTaskKind::TpComm: return "tp-comm";
    case SimTaskKind::SendForward: return "send-forward";
    case SimTaskKind::SendBackward: return "send-backward";
    case SimTaskKind::DpComm: return "dp-bucket";
    case SimTaskKind::ZeroAllGather: return "zero-all-gather";
    case SimTaskKind::Optimizer: return "optimizer";
    case SimTaskKind::Offload: return "offload";
    case SimTaskKind::Reload: return "reload";
    case SimTaskKind::EpAllToAll: return "ep-all-to-all";
    case SimTaskKind::CpRing: return "cp-ring";
    case SimTaskKind::EmbeddingSync: return "embedding-sync";
  }
  return "?";
}

int placement_rank(const std::string& order, const Layout& layout, int d, int p, int t) {
  Layout l = layout;
  l.order = order;
  return coords_to_rank({d, p, t}, l);
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Task {
  SimTaskKind kind = SimTaskKind::Forward;
  SimStream stream = SimStream::Compute;
  int stage = 0;
  int microbatch = -1;
  int chunk = -1;
  int bucket = -1;
  int ring_step = -1;          // context ring step (SimEvent::ring_step)
  double work_s = 0;           // stand-alone duration
  int links[2] = {-1, -1};     // shared links crossed (contention), -1 = none
  double demand[2] = {0, 0};   // fraction of each link used at the priced rate
  int deps = 0;                // unfinished dependencies
  int last_dep = -1;           // the dependency that finished last (for attribution)
  std::vector<int> succ;
  double start_s = -1;
  double end_s = -1;
  double remaining_s = 0;      // shared transfers: stand-alone seconds still to go
  double rate = 1;
};

bool ordered(SimStream s) {
  return s == SimStream::Compute || s == SimStream::Comm || s == SimStream::Pcie || s == SimStream::Gather;
}

class Engine {
 public:
  Engine(std::vector<Task>& tasks, int stages, int links, bool contention)
      : tasks_(tasks), queues_(size_t(stages) * kSimStreams), busy_(queues_.size(), 0),
        head_(queues_.size(), 0), link_load_(size_t(std::max(links, 0)), 0.0),
        contention_(contention) {
    for (int i = 0; i < int(tasks_.size()); ++i) {
      const Task& t = tasks_[i];
      if (ordered(t.stream)) queues_[queue_of(t)].push_back(i);
    }
  }

  // Runs to completion; returns false when some task never ran (a cycle: a bug in the graph).
  bool run() {
    for (int i = 0; i < int(tasks_.size()); ++i) try_start(i);
    if (rates_dirty_) update_rates();  // tasks sharing a link from the start share it from the start
    while (true) {
      const double t_fixed = heap_.empty() ? kInf : heap_.top().first;
      const double t_shared = next_shared_finish();
      if (t_fixed == kInf && t_shared == kInf) break;
      if (t_fixed <= t_shared) {
        const int id = heap_.top().second;
        heap_.pop();
        advance_shared(t_fixed);
        finish(id);
      } else {
        advance_shared(t_shared);
        // Finish every shared transfer that is done now (ties finish together).
        std::vector<int> done;
        for (int id : active_) {
          if (tasks_[id].remaining_s <= 1e-12 * std::max(1.0, tasks_[id].work_s)) done.push_back(id);
        }
        if (done.empty()) {  // numerical guard: finish the closest one
          int best = active_.front();
          for (int id : active_) {
            if (tasks_[id].remaining_s / tasks_[id].rate < tasks_[best].remaining_s / tasks_[best].rate) best = id;
          }
          done.push_back(best);
        }
        for (int id : done) remove_active(id);
        for (int id : done) finish(id);
      }
      if (rates_dirty_) update_rates();
    }
    for (const Task& t : tasks_) {
      if (t.end_s < 0) return false;
    }
    return true;
  }

  int64_t processed() const { return processed_; }

 private:
  size_t queue_of(const Task& t) const { return size_t(t.stage) * kSimStreams + size_t(t.stream); }

  void try_start(int id) {
    Task& t = tasks_[id];
    if (t.deps > 0 || t.start_s >= 0) return;
    if (ordered(t.stream)) {
      const size_t q = queue_of(t);
      if (busy_[q] || queues_[q][head_[q]] != id) return;
      busy_[q] = 1;
    }
    t.start_s = now_;
    const bool shared = contention_ && t.links[0] >= 0 && t.work_s > 0;
    if (shared) {
      t.remaining_s = t.work_s;
      active_.push_back(id);
      for (int i = 0; i < 2; ++i) {
        if (t.links[i] >= 0) link_load_[size_t(t.links[i])] += t.demand[i];
      }
      rates_dirty_ = true;
    } else {
      heap_.push({now_ + t.work_s, id});
    }
  }

  void finish(int id) {
    Task& t = tasks_[id];
    now_ = std::max(now_, t.start_s + 0.0);
    t.end_s = now_;
    ++processed_;
    if (ordered(t.stream)) {
      const size_t q = queue_of(t);
      busy_[q] = 0;
      ++head_[q];
      if (head_[q] < queues_[q].size()) try_start(queues_[q][head_[q]]);
    }
    for (int s : t.succ) {
      Task& n = tasks_[s];
      --n.deps;
      n.last_dep = id;
      try_start(s);
    }
  }

  void remove_active(int id) {
    auto it = std::find(active_.begin(), active_.end(), id);
    if (it != active_.end()) {
      *it = active_.back();
      active_.pop_back();
    }
    for (int i = 0; i < 2; ++i) {
      const int l = tasks_[id].links[i];
      if (l >= 0) link_load_[size_t(l)] -= tasks_[id].demand[i];
    }
    rates_dirty_ = true;
  }

  void advance_shared(double t) {
    if (t > now_) {
      const double dt = t - now_;
      for (int id : active_) tasks_[id].remaining_s -= dt * tasks_[id].rate;
      now_ = t;
    }
  }

  void update_rates() {
    for (int id : active_) {
      Task& t = tasks_[id];
      double load = 1;
      for (int l : t.links) {
        if (l >= 0) load = std::max(load, link_load_[size_t(l)]);
      }
      t.rate = 1.0 / load;
    }
    rates_dirty_ = false;
  }

  double next_shared_finish() const {
    double best = kInf;
    for (int id : active_) {
      const Task& t = tasks_[id];
      best = std::min(best, now_ + std::max(0.0, t.remaining_s) / t.rate);
    }
    return best;
  }

  std::vector<Task>& tasks_;
  std::vector<std::vector<int>> queues_;
  std::vector<char> busy_;
  std::vector<size_t> head_;
  std::vector<double> link_load_;
  std::vector<int> active_;
  bool contention_;
  bool rates_dirty_ = false;
  double now_ = 0;
  int64_t processed_ = 0;
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap_;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(std::vector<Task>& tasks) : tasks_(tasks) {}
  int add(SimTaskKind kind, SimStream stream, int stage, int mb, int chunk, double work_s,
          std::initializer_list<int> deps = {}) {
    Task t;
    t.kind = kind;
    t.stream = stream;
    t.stage = stage;
    t.microbatch = mb;
    t.chunk = chunk;
    t.work_s = std::max(0.0, work_s);
    tasks_.push_back(std::move(t));
    const int id = int(tasks_.size()) - 1;
    for (int d : deps) depend(id, d);
    return id;
  }
  void depend(int id, int on) {
    if (on < 0 || id < 0) return;
    tasks_[on].succ.push_back(id);
    ++tasks_[id].deps;
  }

 private:
  std::vector<Task>& tasks_;
};

}  // namespace

namespace {

// Why the inputs cannot be simulated; empty when they can.
std::string check_step_inputs(const StepCosts& costs, const Layout& layout, int64_t num_microbatches) {
  const int pp = layout.pp;
  const int vp = layout.schedule == Schedule::Interleaved ? layout.vp : 1;
  const int chunks = pp * vp;
  if (pp < 1 || vp < 1 || layout.dp < 1 || layout.tp < 1) return "layout: dp, tp, pp and vp must be >= 1";
  if (costs.cp < 1 || costs.cp > (1 << 16)) return "step costs: cp must be between 1 and 65536";
  if (num_microbatches < 1) return "num_microbatches: must be >= 1 (gbs must be a multiple of dp * mbs)";
  if (num_microbatches > (int64_t(1) << 24)) {
    return "num_microbatches: too many to simulate (" + std::to_string(num_microbatches) + ")";
  }
  if (int(costs.chunks.size()) != chunks) {
    return "step costs: expected pp * vp = " + std::to_string(chunks) + " chunks, found " +
           std::to_string(costs.chunks.size());
  }
  // The task graph holds about 10 tasks per micro-batch and model chunk (forward, recompute,
  // two backward parts, TP collectives, sends, offload and reload, ZeRO gathers) plus 16 per
  // stage; with cp > 1 each ring (forward, backward, and the recompute's with full recompute)
  // adds 2 cp (the rest of the pass, cp block attentions, cp - 1 transfers), and the last
  // micro-batch's backward, cut into one piece per DP bucket, one ring per piece: bound its
  // memory before building it.
  const int64_t ring = costs.cp > 1 ? 2 * int64_t(costs.cp) : 0;
  const int64_t per = 10 + ring * (costs.cp_ring_in_recompute ? 3 : 2);
  const int64_t tasks = int64_t(chunks) * num_microbatches * per + 16 * int64_t(pp) +
                        int64_t(pp) * std::max(1, costs.dp_buckets) * ring;
  if (tasks > ResourceLimits::max_simulated_tasks) {
    return "the step's task graph would hold about " + std::to_string(tasks) + " tasks (pp " + std::to_string(pp) +
           " x vp " + std::to_string(vp) + " x " + std::to_string(num_microbatches) + " micro-batches x " +
           std::to_string(per) + (ring > 0 ? " with cp " + std::to_string(costs.cp) + "'s ring steps" : "") +
           "), over the limit of " + std::to_string(ResourceLimits::max_simulated_tasks) +
           " simulated tasks (about 200 bytes each); simulate fewer micro-batches (a "
           "smaller gbs or a larger mbs) or use the estimate, which has no such limit";
  }
  return {};
}

// Where the simulated GPUs sit and the links their transfers share: the simulated GPU of stage s
// is (dp 0, stage s, tp 0); each node's NICs per direction (out = 2k, in = 2k + 1; the cluster's
// inter_node_gbit_per_s is per direction), then each simulated GPU's NVLink port.
struct StageLinks {
  std::map<int, int> node_link;  // node -> NIC link id
  std::vector<bool> dp_crosses;  // stage s's dp group leaves its node
  std::vector<bool> ep_crosses, cp_crosses;  // its expert group, its context ring
  // GPUs of stage s on stage s's node (all dp and tp ranks), as a fraction of the node: the NIC
  // demand of the stage's transfers.
  std::vector<double> nic_demand;
  std::vector<int> stage_node;
  int nvl0 = 0, num_links = 0;

  StageLinks(const Layout& layout, int gpus_per_node, StepSimulation& out) {
    const int pp = layout.pp;
    out.stage_rank.resize(size_t(pp));
    out.stage_node.resize(size_t(pp));
    dp_crosses.assign(size_t(pp), false);
    for (int s = 0; s < pp; ++s) {
      out.stage_rank[s] = placement_rank(layout.order, layout, 0, s, 0);
      out.stage_node[s] = out.stage_rank[s] / gpus_per_node;
      node_link.emplace(out.stage_node[s], int(node_link.size()));
      const int far = placement_rank(layout.order, layout, layout.dp - 1, s, 0) / gpus_per_node;
      dp_crosses[s] = far != out.stage_node[s];
    }
    auto leaves_node = [&](int s, RankGroup g) {
      for (int r : group_ranks(out.stage_rank[s], layout, g))
        if (r / gpus_per_node != out.stage_node[s]) return true;
      return false;
    };
    ep_crosses.assign(size_t(pp), false);
    cp_crosses.assign(size_t(pp), false);
    for (int s = 0; s < pp; ++s) {
      if (layout.ep > 1) ep_crosses[s] = leaves_node(s, RankGroup::Ep);
      if (layout.cp > 1) {
        cp_crosses[s] = leaves_node(s, RankGroup::Cp);
        dp_crosses[s] = leaves_node(s, RankGroup::DpCp);  // the gradients' group with cp
      }
    }
    stage_node = out.stage_node;
    nic_demand.assign(size_t(pp), 0.0);
    const int gpus = layout.gpus();
    for (int s = 0; s < pp; ++s) {
      const int first = out.stage_node[s] * gpus_per_node;
      int n = 0;
      for (int r = first; r < std::min(gpus, first + gpus_per_node); ++r) n += rank_to_coords(r, layout).pp == s;
      nic_demand[s] = double(std::max(n, 1)) / std::max(1, std::min(gpus_per_node, gpus));
    }
    nvl0 = 2 * int(node_link.size());
    num_links = nvl0 + pp;
  }
  int nic_out(int s) const { return 2 * node_link.at(stage_node[s]); }
  int nic_in(int s) const { return 2 * node_link.at(stage_node[s]) + 1; }
  int nvl(int s) const { return nvl0 + s; }

  // A ring collective over stage s's dp group sends and receives through the node's NICs (both
  // directions) when the group leaves the node, else over the GPU's NVLink port.
  void dp_link(Task& t, int s) const {
    if (dp_crosses[s]) {
      t.links[0] = nic_out(s);
      t.links[1] = nic_in(s);
      t.demand[0] = t.demand[1] = nic_demand[s];
    } else {
      t.links[0] = nvl(s);
      t.demand[0] = 1.0;
    }
  }
  // Expert all-to-alls and context-ring transfers of stage s: through the node's NICs when the
  // group leaves the node (every GPU of the node exchanges at once), else the GPU's NVLink port.
  void group_link(Task& t, int s, bool crosses) const {
    if (crosses) {
      t.links[0] = nic_out(s);
      t.links[1] = nic_in(s);
      t.demand[0] = t.demand[1] = nic_demand[s];
    } else {
      t.links[0] = nvl(s);
      t.demand[0] = 1.0;
    }
  }
  // A point-to-point send from stage `from` to stage `to`.
  void p2p_link(Task& t, int from, int to) const {
    if (from == to) {
      t.work_s = 0;  // same GPU (pp == 1 with several chunks): no transfer
    } else if (stage_node[from] != stage_node[to]) {
      t.links[0] = nic_out(from);
      t.links[1] = nic_in(to);
      t.demand[0] = nic_demand[from];
      t.demand[1] = nic_demand[to];
    } else {
      t.links[0] = nvl(from);
      t.demand[0] = 1;
    }
  }
};

// The step's task graph, built from the schedule table: each stage's compute, DP, offload and
// ZeRO tasks in stream order, then the sends between consecutive chunks.
class StepGraph {
 public:
  StepGraph(const StepCosts& costs, const Layout& layout, int m, const std::vector<std::vector<PipelineAction>>& table,
            const StageLinks& links, const StepSimulationOptions& options)
      : costs_(costs), layout_(layout), table_(table), links_(links), options_(options), g_(tasks_), m_(m) {
    pp_ = layout.pp;
    vp_ = layout.schedule == Schedule::Interleaved ? layout.vp : 1;
    chunks_ = pp_ * vp_;
    const size_t ring = costs.cp > 1 ? 2 * size_t(costs.cp) : 0;
    tasks_.reserve(size_t(pp_) * vp_ * m * (10 + 3 * ring) + size_t(pp_) * (16 + size_t(std::max(1, costs.dp_buckets)) * ring));
    const size_t n_mc = size_t(m) * chunks_;
    fwd_first_.assign(n_mc, -1), fwd_done_.assign(n_mc, -1), bwd_first_.assign(n_mc, -1);
    bwd_done_.assign(n_mc, -1), offload_task_.assign(n_mc, -1), reload_task_.assign(n_mc, -1);
    plan_dp();
    for (int s = 0; s < pp_; ++s) add_stage(s);
    // The end stages' embedding exchange waits for the other end to arrive too.
    if (sync_[0] >= 0 && sync_[1] >= 0)
      for (int e = 0; e < 2; ++e)
        for (int d : arrive_[1 - e]) g_.depend(sync_[e], d);
    link_transfers();
    add_sends();
  }

  std::vector<Task>& tasks() { return tasks_; }
  size_t idx(int mb, int gc) const { return size_t(mb) * chunks_ + size_t(gc); }
  int fwd_first(size_t k) const { return fwd_first_[k]; }
  int bwd_done(size_t k) const { return bwd_done_[k]; }
  int offload_task(size_t k) const { return offload_task_[k]; }
  int reload_task(size_t k) const { return reload_task_[k]; }

 private:
  // DP gradients (ZeRO 0-2): buckets all-reduced (ZeRO 1-2: reduce-scattered, and the updated
  // weights all-gathered, the same volume, Rajbhandari et al. 2020 Sec 7.2.1) on the comm stream
  // as the last micro-batch's backward of each chunk produces them, layer by layer (PyTorch DDP,
  // Li et al. 2020; Megatron-LM overlap_grad_reduce). That backward is cut into one piece per
  // bucket, each piece followed by its bucket. The ZeRO-1/2 all-gather is counted in the buckets,
  // as if overlapped like the reduce-scatter (Megatron-LM overlap_param_gather hides it behind
  // the next step's forward). The planner prices the whole as costs.dp_comm_s.
  void plan_dp() {
    // Gradients are reduced over dp * cp (the context ranks hold the same weights).
    const bool has_dp = layout_.dp * layout_.cp > 1 && costs_.dp_comm_s > 0;
    // ZeRO-3 in ring mode: the planner already took the layer-by-layer prefetch into account and
    // gives the exposed part, replayed as a wait on the compute stream after each backward.
    zero3_ring_ = has_dp && layout_.zero >= 3 && costs_.zero3_exposed_s >= 0;
    zero3_ = has_dp && layout_.zero >= 3 && !zero3_ring_;
    // Without overlap (costs.dp_overlap false) the whole reduction is one task after the stage's
    // last backward.
    dp_after_backward_ = has_dp && !zero3_ && !zero3_ring_ && !costs_.dp_overlap;
    total_buckets_ = has_dp && !zero3_ && !zero3_ring_ && !dp_after_backward_ ? std::max(1, costs_.dp_buckets) : 0;
    // ZeRO-3: per micro-batch and chunk, weights all-gathered before forward and before backward,
    // gradients reduce-scattered after backward: costs.dp_comm_s is m * 3 such collectives of a
    // stage (Rajbhandari et al. 2020 Sec 7.2.2); a chunk's share is 1/vp of each.
    zero3_piece_s_ = zero3_ ? costs_.dp_comm_s / (3.0 * m_ * vp_) : 0.0;
    last_mb_.assign(size_t(pp_), std::vector<int>(size_t(vp_), -1));
    buckets_of_.assign(size_t(pp_), std::vector<int>(size_t(vp_), 0));
    for (int s = 0; s < pp_ && total_buckets_ > 0; ++s) {
      std::vector<int> order;  // chunks in the order of their last backward
      for (int i = int(table_[s].size()) - 1; i >= 0; --i) {
        const auto& a = table_[s][size_t(i)];
        if (a.pass == Pass::Backward && last_mb_[s][size_t(a.chunk)] < 0) {
          last_mb_[s][size_t(a.chunk)] = a.microbatch;
          order.insert(order.begin(), a.chunk);
        }
      }
      for (int r = 0; r < int(order.size()); ++r) {
        buckets_of_[s][size_t(order[size_t(r)])] = total_buckets_ / vp_ + (r < total_buckets_ % vp_ ? 1 : 0);
      }
    }
  }

  // Stage s's tasks in stream order, following the schedule table. ZeRO-3 all-gathers prefetch
  // one action ahead: they may start once the compute stream has reached the previous action.
  // Activation offload and reload go layer by layer (as Megatron-LM / Transformer Engine CPU
  // offloading does): a chunk's offload starts with its forward and its reload with its
  // backward, on the PCIe stream, and the next compute task waits for the transfer to end, so a
  // transfer longer than the compute it overlaps exposes the difference (the cost model's
  // max(0, offload - forward) + max(0, reload - backward) per micro-batch).
  void add_stage(int s) {
    std::vector<int> stage_dp;  // DP tasks the optimizer waits for
    int last_compute = -1;      // last compute task created on this stage
    int prev_action_pred = -1;
    for (const PipelineAction& a : table_[s]) {
      const int gc = a.chunk * pp_ + s;
      int gather = -1;
      if (zero3_) {
        gather = g_.add(SimTaskKind::ZeroAllGather, SimStream::Gather, s, a.microbatch, gc, zero3_piece_s_,
                        {prev_action_pred});
        links_.dp_link(tasks_[size_t(gather)], s);
      }
      prev_action_pred = last_compute;
      if (a.pass == Pass::Forward) {
        last_compute = add_forward(s, a, gather, last_compute);
      } else {
        last_compute = add_backward(s, a, gather, last_compute, stage_dp);
      }
    }
    if (dp_after_backward_ && last_compute >= 0) {
      const int d = g_.add(SimTaskKind::DpComm, SimStream::Comm, s, -1, -1, costs_.dp_comm_s, {last_compute});
      tasks_[size_t(d)].bucket = bucket_counter_++;
      links_.dp_link(tasks_[size_t(d)], s);
      stage_dp.push_back(d);
    }
    // The end stages sum the tied embedding's gradient once both have finished their backward and
    // their data-parallel collectives (Megatron-LM finalizes the data-parallel reduction first;
    // the other end's are added once every stage is built), then step.
    if (costs_.embedding_sync_s > 0 && pp_ > 1 && (s == 0 || s == pp_ - 1)) {
      const int e = s == 0 ? 0 : 1;
      arrive_[e] = stage_dp;
      if (last_compute >= 0) arrive_[e].push_back(last_compute);
      sync_[e] = g_.add(SimTaskKind::EmbeddingSync, SimStream::Compute, s, -1, -1, costs_.embedding_sync_s);
      for (int d : arrive_[e]) g_.depend(sync_[e], d);
    }
    // Optimizer step after the stage's last backward and all of its DP collectives.
    const int o = g_.add(SimTaskKind::Optimizer, SimStream::Compute, s, -1, -1, costs_.optimizer_s);
    for (int d : stage_dp) g_.depend(o, d);
  }

  // A forward (and its TP collective, and the offload of its activations); returns the last
  // compute task.
  int add_forward(int s, const PipelineAction& a, int gather, int before) {
    const int gc = a.chunk * pp_ + s;
    const ChunkCosts& c = costs_.chunks[size_t(gc)];
    const size_t k = idx(a.microbatch, gc);
    int f = -1;
    int last = add_pass(s, SimTaskKind::Forward, a.microbatch, gc, c.forward_s, c.num_layers * costs_.cp_attention_step_s,
                        c.num_layers * costs_.cp_transfer_s, f);
    g_.depend(f, gather);
    if (c.tp_comm_forward_s > 0) {
      last = g_.add(SimTaskKind::TpComm, SimStream::Compute, s, a.microbatch, gc, c.tp_comm_forward_s);
    }
    last = add_moe(s, a.microbatch, gc, c.ep_comm_forward_s, last);
    fwd_first_[k] = f;
    fwd_done_[k] = last;
    if (c.offload_s > 0 || c.reload_s > 0) {
      offload_task_[k] = g_.add(SimTaskKind::Offload, SimStream::Pcie, s, a.microbatch, gc, c.offload_s, {before});
    }
    return last;
  }

  // The chunk's expert all-to-alls, blocking on the compute stream and sharing the links
  // (cost_model_moe.cpp gives the durations); returns the last task.
  int add_moe(int s, int microbatch, int gc, double ep_s, int last) {
    if (ep_s > 0) {
      last = g_.add(SimTaskKind::EpAllToAll, SimStream::Compute, s, microbatch, gc, ep_s);
      links_.group_link(tasks_[size_t(last)], s, links_.ep_crosses[size_t(s)]);
    }
    return last;
  }

  // One pass (forward, recompute or a backward piece) of `work_s` on the compute stream; returns
  // its last task and sets `first`. With cp > 1 the pass holds cp steps of block attention,
  // `attention_s` each (the chunk's layers' step together: cost_model_moe.cpp's A(s/cp) per
  // layer), and cp - 1 transfers of the next K/V block on the Ring stream, `transfer_s` each, on
  // the cp group's link (Liu et al. 2023; Megatron-Core's ring, which starts the send/receive of
  // block i + 1, computes block i, then waits for both). The rest of the pass runs first.
  // Transfer i starts with attention step i, and step i + 1 waits for it, so a step takes
  // max(attention, transfer) and a transfer longer than the attention shows on the compute stream
  // by the difference: the cost model's (cp - 1) max(0, t_x - t_a) without contention, more
  // where the link is shared.
  int add_pass(int s, SimTaskKind kind, int microbatch, int gc, double work_s, double attention_s, double transfer_s,
               int& first) {
    const int cp = costs_.cp;
    if (cp <= 1 || (attention_s <= 0 && transfer_s <= 0)) {
      first = g_.add(kind, SimStream::Compute, s, microbatch, gc, work_s);
      return first;
    }
    first = g_.add(kind, SimStream::Compute, s, microbatch, gc, work_s - cp * attention_s);
    int prev_compute = first, prev_transfer = -1;
    for (int i = 0; i < cp; ++i) {
      int transfer = -1;
      if (i + 1 < cp) {
        transfer = g_.add(SimTaskKind::CpRing, SimStream::Ring, s, microbatch, gc, transfer_s,
                          {prev_compute, prev_transfer});
        tasks_[size_t(transfer)].ring_step = i;
        links_.group_link(tasks_[size_t(transfer)], s, links_.cp_crosses[size_t(s)]);
      }
      const int step = g_.add(kind, SimStream::Compute, s, microbatch, gc, attention_s, {prev_transfer});
      tasks_[size_t(step)].ring_step = i;
      prev_compute = step;
      prev_transfer = transfer;
    }
    return prev_compute;
  }

  // A backward: the reload, the recompute, the backward in one piece per DP bucket on the last
  // micro-batch (each piece followed by its bucket), the ZeRO-3 waits and reduce-scatter; returns
  // the last compute task.
  int add_backward(int s, const PipelineAction& a, int gather, int before, std::vector<int>& stage_dp) {
    const int gc = a.chunk * pp_ + s;
    const ChunkCosts& c = costs_.chunks[size_t(gc)];
    const size_t k = idx(a.microbatch, gc);
    if (offload_task_[k] >= 0) {
      reload_task_[k] = g_.add(SimTaskKind::Reload, SimStream::Pcie, s, a.microbatch, gc, c.reload_s,
                               {offload_task_[k], before});
    }
    int first = -1;
    if (c.recompute_s > 0) {
      const double nl = c.num_layers;
      add_pass(s, SimTaskKind::Recompute, a.microbatch, gc, c.recompute_s,
               costs_.cp_ring_in_recompute ? nl * costs_.cp_attention_step_s : 0.0,
               costs_.cp_ring_in_recompute ? nl * costs_.cp_transfer_s : 0.0, first);
    }
    const bool last_microbatch = a.microbatch == last_mb_[s][size_t(a.chunk)];
    const int pieces = last_microbatch ? std::max(1, buckets_of_[s][size_t(a.chunk)]) : 1;
    int last = -1;
    for (int p = 0; p < pieces; ++p) {
      int bi = -1;
      add_pass(s, SimTaskKind::BackwardInput, a.microbatch, gc, c.backward_input_s / pieces,
               c.num_layers * costs_.cp_attention_step_backward_s / pieces,
               c.num_layers * costs_.cp_transfer_backward_s / pieces, bi);
      if (first < 0) first = bi;
      if (c.tp_comm_backward_s > 0) {
        g_.add(SimTaskKind::TpComm, SimStream::Compute, s, a.microbatch, gc, c.tp_comm_backward_s / pieces);
      }
      last = g_.add(SimTaskKind::BackwardWeight, SimStream::Compute, s, a.microbatch, gc, c.backward_weight_s / pieces);
      last = add_moe(s, a.microbatch, gc, c.ep_comm_backward_s / pieces, last);
      if (last_microbatch && buckets_of_[s][size_t(a.chunk)] > 0) {
        const int d = g_.add(SimTaskKind::DpComm, SimStream::Comm, s, -1, gc, costs_.dp_comm_s / total_buckets_, {last});
        tasks_[size_t(d)].bucket = bucket_counter_++;
        links_.dp_link(tasks_[size_t(d)], s);
        stage_dp.push_back(d);
      }
    }
    if (gather >= 0) g_.depend(first, gather);
    bwd_first_[k] = first;
    bwd_done_[k] = last;
    if (zero3_ring_) {
      last = g_.add(SimTaskKind::DpComm, SimStream::Compute, s, a.microbatch, gc,
                    costs_.zero3_exposed_s / (double(m_) * vp_));
      bwd_done_[k] = last;
    }
    if (zero3_) {
      const int rs = g_.add(SimTaskKind::DpComm, SimStream::Comm, s, a.microbatch, gc, zero3_piece_s_, {last});
      links_.dp_link(tasks_[size_t(rs)], s);
      stage_dp.push_back(rs);
    }
    return last;
  }

  // The next compute task after each compute task of the same stage waits for the offload (after
  // forward) and the reload (after backward) of the same micro-batch and chunk.
  void link_transfers() {
    next_compute_.assign(tasks_.size(), -1);
    std::vector<int> prev(static_cast<size_t>(pp_), -1);
    for (int i = 0; i < int(tasks_.size()); ++i) {
      if (tasks_[size_t(i)].stream != SimStream::Compute) continue;
      int& p = prev[size_t(tasks_[size_t(i)].stage)];
      if (p >= 0) next_compute_[size_t(p)] = i;
      p = i;
    }
    for (size_t k = 0; k < fwd_done_.size(); ++k) {
      if (offload_task_[k] >= 0) g_.depend(next_compute_[size_t(fwd_done_[k])], offload_task_[k]);
      if (reload_task_[k] >= 0) g_.depend(next_compute_[size_t(bwd_done_[k])], reload_task_[k]);
    }
  }

  // Point-to-point sends between consecutive global chunks, after the chunk's forward (resp. its
  // whole backward, as Megatron-LM sends the gradient after backward_step). With blocking_p2p
  // (Megatron-LM's send/recv pairs wait for completion) the sender's next compute waits too.
  // A chunk's offload starts with its forward and its reload with its backward: each also waits
  // for what that compute task waits for (the input from the previous chunk, a blocking send).
  void depend_start(int compute, int on) {
    if (compute < 0) return;
    g_.depend(compute, on);
    if (copy_with_[size_t(compute)] >= 0) g_.depend(copy_with_[size_t(compute)], on);
  }

  void add_sends() {
    copy_with_.assign(tasks_.size(), -1);
    for (size_t k = 0; k < fwd_first_.size(); ++k) {
      if (offload_task_[k] >= 0) copy_with_[size_t(fwd_first_[k])] = offload_task_[k];
      if (reload_task_[k] >= 0 && bwd_first_[k] >= 0) copy_with_[size_t(bwd_first_[k])] = reload_task_[k];
    }
    for (int mb = 0; mb < m_; ++mb) {
      for (int gc = 0; gc < chunks_; ++gc) {
        const int s = gc % pp_;
        const size_t k = idx(mb, gc);
        if (gc + 1 < chunks_) {
          const int id = g_.add(SimTaskKind::SendForward, SimStream::SendNext, s, mb, gc, costs_.p2p_s, {fwd_done_[k]});
          links_.p2p_link(tasks_[size_t(id)], s, (gc + 1) % pp_);
          depend_start(fwd_first_[idx(mb, gc + 1)], id);
          if (options_.blocking_p2p) depend_start(next_compute_[size_t(fwd_done_[k])], id);
        }
        if (gc > 0) {
          const int id = g_.add(SimTaskKind::SendBackward, SimStream::SendPrev, s, mb, gc, costs_.p2p_s, {bwd_done_[k]});
          links_.p2p_link(tasks_[size_t(id)], s, (gc - 1) % pp_);
          depend_start(bwd_first_[idx(mb, gc - 1)], id);
          if (options_.blocking_p2p) depend_start(next_compute_[size_t(bwd_done_[k])], id);
        }
      }
    }
  }

  const StepCosts& costs_;
  const Layout& layout_;
  const std::vector<std::vector<PipelineAction>>& table_;
  const StageLinks& links_;
  const StepSimulationOptions& options_;
  std::vector<Task> tasks_;
  GraphBuilder g_;
  int m_ = 0, pp_ = 1, vp_ = 1, chunks_ = 1;
  std::vector<int> copy_with_;  // the offload or reload that starts with a compute task
  bool zero3_ring_ = false, zero3_ = false, dp_after_backward_ = false;
  int total_buckets_ = 0, bucket_counter_ = 0;
  double zero3_piece_s_ = 0;
  std::vector<std::vector<int>> last_mb_, buckets_of_;
  // (microbatch, global chunk) -> task ids.
  std::vector<int> fwd_first_, fwd_done_, bwd_first_, bwd_done_, offload_task_, reload_task_;
  std::vector<int> next_compute_;
  int sync_[2] = {-1, -1};          // the first and last stage's embedding exchange
  std::vector<int> arrive_[2];      // what each of them waits for on its own stage
};

// Breakdown of one simulated GPU: its compute-stream work by kind, and each idle gap charged to
// what it waited for (the dependency that finished last): a transfer's own duration to its term
// (a pipeline send's: at most `send_copy_s`, StepCosts::p2p_copy_s), the rest of the
// gap to the bubble; the idle tail after its last task is bubble too. So each GPU's terms sum to
// the step time.
std::vector<TimeBreakdown> stage_breakdowns(const std::vector<Task>& tasks, int pp, double step,
                                            double send_copy_s) {
  std::vector<TimeBreakdown> per_stage(static_cast<size_t>(pp));
  std::vector<double> prev_end(size_t(pp), 0.0);
  // A gap of stage `stage` before a task whose last dependency was `dep`.
  auto charge_gap = [&](TimeBreakdown& b, double gap, int dep, int stage) {
    if (gap <= 0) return;
    if (dep < 0) {
      b.bubble += gap;
      return;
    }
    const Task& d = tasks[size_t(dep)];
    const double dur = d.end_s - d.start_s;
    switch (d.kind) {
      case SimTaskKind::SendForward:
      case SimTaskKind::SendBackward: {
        // The receiving rank's copy is pp_comm; the rest of the transfer (its wait for the
        // message and a core, where CPU ranks take turns on the cores) is bubble, as the estimate
        // and the runtime count it.
        const double x = std::min({gap, dur, send_copy_s});
        b.pp_comm += x;
        b.bubble += gap - x;
        break;
      }
      case SimTaskKind::CpRing: {  // the part of a ring step's transfer its attention did not hide
        const double x = std::min(gap, dur);
        b.cp_comm += x;
        b.bubble += gap - x;
        break;
      }
      // Another stage's collective (the end stages' embedding exchange waits for the other end's
      // data-parallel reduction) is that stage's drain: bubble, as the runtime counts it.
      case SimTaskKind::DpComm:
      case SimTaskKind::ZeroAllGather: (d.stage == stage ? b.dp_comm : b.bubble) += gap; break;
      case SimTaskKind::Reload:
      case SimTaskKind::Offload: b.offload += gap; break;
      default: b.bubble += gap; break;
    }
  };
  for (const Task& t : tasks) {
    if (t.stream != SimStream::Compute) continue;
    TimeBreakdown& b = per_stage[size_t(t.stage)];
    double& prev = prev_end[size_t(t.stage)];
    charge_gap(b, t.start_s - prev, t.last_dep, t.stage);
    const double dur = t.end_s - t.start_s;
    switch (t.kind) {
      case SimTaskKind::Forward:
      case SimTaskKind::BackwardInput:
      case SimTaskKind::BackwardWeight: b.compute += dur; break;
      case SimTaskKind::Recompute: b.recompute += dur; break;
      case SimTaskKind::TpComm: b.tp_comm += dur; break;
      case SimTaskKind::EmbeddingSync: b.pp_comm += dur; break;
      case SimTaskKind::EpAllToAll: b.ep_comm += dur; break;
      case SimTaskKind::Optimizer: b.optimizer += dur; break;
      // The exposed ZeRO-3 traffic the planner gives (ring mode, capplan-train's blocking calls)
      // is a wait on the compute stream.
      case SimTaskKind::DpComm: b.dp_comm += dur; break;
      default: break;
    }
    prev = t.end_s;
  }
  for (int s = 0; s < pp; ++s) {
    const double tail = step - prev_end[size_t(s)];
    if (tail > 0) per_stage[size_t(s)].bubble += tail;
  }
  return per_stage;
}

// Per GPU, `cost` times the time its data-parallel buckets (comm stream) overlap its compute
// stream.
std::vector<double> bucket_contention(const std::vector<Task>& tasks, int pp, double cost) {
  std::vector<double> out(size_t(pp), 0.0);
  if (cost <= 0) return out;
  std::vector<std::vector<std::pair<double, double>>> buckets(static_cast<size_t>(pp));
  std::vector<std::vector<std::pair<double, double>>> compute(static_cast<size_t>(pp));
  for (const Task& t : tasks) {
    if (t.kind == SimTaskKind::DpComm && t.stream == SimStream::Comm && t.bucket >= 0)
      buckets[size_t(t.stage)].push_back({t.start_s, t.end_s});
    else if (t.stream == SimStream::Compute && t.end_s > t.start_s)
      compute[size_t(t.stage)].push_back({t.start_s, t.end_s});
  }
  for (int s = 0; s < pp; ++s) {
    auto& cs = compute[size_t(s)];
    if (buckets[size_t(s)].empty()) continue;
    std::sort(cs.begin(), cs.end());
    for (const auto& [b0, b1] : buckets[size_t(s)]) {
      // Compute intervals on one stream do not overlap one another: sum their intersections.
      auto it = std::lower_bound(cs.begin(), cs.end(), std::make_pair(b0, b0),
                                 [](const auto& a, const auto& b) { return a.second < b.first; });
      for (; it != cs.end() && it->first < b1; ++it)
        out[size_t(s)] += std::max(0.0, std::min(b1, it->second) - std::max(b0, it->first));
    }
    out[size_t(s)] *= cost;
  }
  return out;
}

// Step time, the critical GPU, busy fractions and the breakdown of the pacing GPU.
void summarize_step(const std::vector<Task>& tasks, int pp, double dp_hidden_cost, double send_copy_s,
                    StepSimulation& out) {
  std::vector<double> stage_end(size_t(pp), 0.0), compute_busy(size_t(pp), 0.0);
  for (const Task& t : tasks) {
    stage_end[size_t(t.stage)] = std::max(stage_end[size_t(t.stage)], t.end_s);
    if (t.stream == SimStream::Compute) compute_busy[size_t(t.stage)] += t.end_s - t.start_s;
  }
  // A data-parallel bucket running beside its GPU's compute slows that compute (the cost model's
  // overlap prior, StepCosts::dp_hidden_cost): the GPU finishes later by that fraction of the
  // time its buckets overlap its compute stream, charged to dp_comm.
  const std::vector<double> dp_contention = bucket_contention(tasks, pp, dp_hidden_cost);
  for (int s = 0; s < pp; ++s) stage_end[size_t(s)] += dp_contention[size_t(s)];
  out.step_time_s = *std::max_element(stage_end.begin(), stage_end.end());
  const double step = out.step_time_s;
  for (int s = 0; s < pp; ++s) {
    if (stage_end[size_t(s)] >= step * (1 - 1e-12)) {
      out.critical_stage = s;
      break;
    }
  }
  out.busy_fraction_per_gpu.resize(size_t(pp));
  for (int s = 0; s < pp; ++s) out.busy_fraction_per_gpu[size_t(s)] = step > 0 ? compute_busy[size_t(s)] / step : 0;

  std::vector<TimeBreakdown> per_stage = stage_breakdowns(tasks, pp, step, send_copy_s);
  for (int s = 0; s < pp; ++s) {
    // The contention delays the GPU's end: it is dp_comm, not tail bubble.
    TimeBreakdown& b = per_stage[size_t(s)];
    const double x = dp_contention[size_t(s)];
    b.dp_comm += x;
    b.bubble = std::max(0.0, b.bubble - x);
  }
  // The pacing GPU. The estimate's breakdown is that of the stage that sets the pace of the 1F1B
  // steady state: m slots of its compute-stream work, its sends and its exposed copies, plus the
  // fill it waits for (cost_model.cpp, "Pace of the pipeline"). The GPU that finishes last may be
  // a lighter one (stage 0 holding fewer layers when pp does not divide them) whose extra idle
  // time is the heavier stages' work, not a pipeline bubble. So the breakdown is taken on the
  // stage with the least bubble, that is the most work of its own (compute, recompute, TP,
  // optimizer, and the transfers it waited for), the last to finish among equals (equal stages:
  // the critical one, with the textbook bubble (p-1)/(m+p-1)). Its bubble is the fill and drain
  // around it, as the estimate's; it also holds any stall the estimate does not model. Where
  // exposed offload copies set the pace, stage 0 (more activations) and the last stage (the LM
  // head) may wait almost equally and the two choices can split compute and offload differently.
  int best = 0;
  for (int s = 1; s < pp; ++s) {
    const double d = per_stage[size_t(s)].bubble - per_stage[size_t(best)].bubble;
    const double tie = 1e-9 * std::max(step, 1e-30);
    if (d < -tie || (d <= tie && stage_end[size_t(s)] > stage_end[size_t(best)] * (1 + 1e-12))) best = s;
  }
  out.breakdown_stage = best;
  out.breakdown_s = per_stage[size_t(best)];
  out.bubble_fraction = step > 0 ? out.breakdown_s.bubble / step : 0;
}

// Activation memory over time per stage: a chunk's activations are allocated when its forward
// starts and freed when its backward ends; offload frees them when the copy to host ends and
// reload brings them back when it starts.
void record_activation_memory(StepGraph& graph, const StepCosts& costs, int pp, int m, bool record_timeline,
                              StepSimulation& out) {
  const std::vector<Task>& tasks = graph.tasks();
  const int chunks = int(costs.chunks.size());
  out.activation_bytes_over_time.assign(size_t(pp), {});
  out.peak_activation_bytes_per_stage.assign(size_t(pp), 0.0);
  std::vector<std::vector<std::pair<double, double>>> deltas(static_cast<size_t>(pp));
  for (int mb = 0; mb < m; ++mb) {
    for (int gc = 0; gc < chunks; ++gc) {
      const size_t k = graph.idx(mb, gc);
      const int s = gc % pp;
      const double bytes = costs.chunks[size_t(gc)].activation_bytes;
      if (bytes <= 0) continue;
      deltas[size_t(s)].push_back({tasks[size_t(graph.fwd_first(k))].start_s, bytes});
      deltas[size_t(s)].push_back({tasks[size_t(graph.bwd_done(k))].end_s, -bytes});
      if (graph.offload_task(k) >= 0) {
        deltas[size_t(s)].push_back({tasks[size_t(graph.offload_task(k))].end_s, -bytes});
        deltas[size_t(s)].push_back({tasks[size_t(graph.reload_task(k))].start_s, bytes});
      }
    }
  }
  for (int s = 0; s < pp; ++s) {
    auto& d = deltas[size_t(s)];
    std::sort(d.begin(), d.end());
    double live = 0, peak = 0;
    auto& series = out.activation_bytes_over_time[size_t(s)];
    series.push_back({0.0, 0.0});
    for (const auto& [t, delta] : d) {
      live += delta;
      if (live < 0 && live > -1e-6 * std::abs(delta)) live = 0;
      peak = std::max(peak, live);
      if (record_timeline) {
        if (!series.empty() && series.back().first == t) series.back().second = live;
        else series.push_back({t, live});
      }
    }
    out.peak_activation_bytes_per_stage[size_t(s)] = peak;
  }
}

// Every task that took time, as an event of the timeline, by start time.
void record_timeline(const std::vector<Task>& tasks, StepSimulation& out) {
  out.timeline.reserve(tasks.size());
  for (const Task& t : tasks) {
    if (t.end_s <= t.start_s) continue;
    SimEvent e;
    e.stage = t.stage;
    e.rank = out.stage_rank[size_t(t.stage)];
    e.stream = t.stream;
    e.kind = t.kind;
    e.microbatch = t.microbatch;
    e.chunk = t.chunk;
    e.bucket = t.bucket;
    e.ring_step = t.ring_step;
    e.start_s = t.start_s;
    e.end_s = t.end_s;
    out.timeline.push_back(e);
  }
  std::stable_sort(out.timeline.begin(), out.timeline.end(),
                   [](const SimEvent& a, const SimEvent& b) { return a.start_s < b.start_s; });
}

// CPU ranks time-sharing their host's cores (costs.host_cores > 0: a device profile of CPU ranks;
// cost_model_cores.cpp has the model and its source, processor sharing): each node's cores are
// one more shared resource. A compute-stream task of stage s (forward, backward, recompute,
// optimizer) stands for the stage's ranks on its node, each wanting a core, so it carries a
// demand of (those ranks) / cores on its node's cores (the cores doing costs.host_efficiency of
// the ideal's work); while the demands of the running tasks sum to D > 1 each runs at 1/D of its
// speed, and a stage that waits (a bubble) takes no core.
// Data-parallel collectives stretch by the node's ranks / cores, unless the profile timed them on
// the shared cores (costs.dp_comm_on_shared_cores). Returns the number of links, the cores'
// included.
int share_host_cores(std::vector<Task>& tasks, const StepCosts& costs, const Layout& layout, int gpus_per_node,
                     const StageLinks& links) {
  if (costs.host_cores <= 0) return links.num_links;
  const int pp = layout.pp, gpus = layout.gpus();
  std::map<int, int> core_link;  // node -> its cores' link id
  std::vector<double> demand(size_t(pp), 0.0);
  for (int s = 0; s < pp; ++s) {
    const int node = links.stage_node[size_t(s)];
    core_link.emplace(node, links.num_links + int(core_link.size()));
    int n = 0;
    for (int r = node * gpus_per_node; r < std::min(gpus, (node + 1) * gpus_per_node); ++r)
      n += rank_to_coords(r, layout).pp == s;
    demand[size_t(s)] = double(std::max(n, 1)) / (costs.host_cores * costs.host_efficiency);
  }
  // The data-parallel collectives run on all ranks at once; their copies and sums are the CPU
  // ranks' own work, so they stretch by (ranks on a node) / cores (cost_model_cores.cpp), and so
  // does the embedding's exchange (a pipeline's transfers take the measured hand-off, p2p_s).
  const double dp_stretch =
      std::max(1.0, double(std::min(gpus, gpus_per_node)) / costs.host_cores) * costs.core_seconds_per_s;
  for (Task& t : tasks) {
    if (t.kind == SimTaskKind::DpComm || t.kind == SimTaskKind::ZeroAllGather || t.kind == SimTaskKind::EmbeddingSync) {
      // (An exchange the profile timed on the shared cores is their time already.)
      if (t.kind == SimTaskKind::EmbeddingSync || !costs.dp_comm_on_shared_cores) t.work_s *= dp_stretch;
      continue;
    }
    const bool busy = t.stream == SimStream::Compute &&
                      (t.kind == SimTaskKind::Forward || t.kind == SimTaskKind::BackwardInput ||
                       t.kind == SimTaskKind::BackwardWeight || t.kind == SimTaskKind::Recompute ||
                       t.kind == SimTaskKind::Optimizer);
    if (!busy || t.links[0] >= 0) continue;
    t.work_s *= costs.core_seconds_per_s;
    t.links[0] = core_link.at(links.stage_node[size_t(t.stage)]);
    t.demand[0] = demand[size_t(t.stage)];
  }
  return links.num_links + int(core_link.size());
}

}  // namespace

StepSimulation simulate_step(const StepCosts& costs, const Layout& layout, int gpus_per_node,
                             int64_t num_microbatches, const StepSimulationOptions& options) {
  StepSimulation out;
  out.error = check_step_inputs(costs, layout, num_microbatches);
  if (!out.error.empty()) return out;
  const int pp = layout.pp;
  const int vp = layout.schedule == Schedule::Interleaved ? layout.vp : 1;
  if (gpus_per_node < 1) gpus_per_node = 1;
  const int m = int(num_microbatches);
  const auto table = build_schedule(layout.schedule, pp, vp, m);
  if (table.empty()) {
    out.error = layout.schedule == Schedule::Interleaved
                    ? "num_microbatches: interleaved 1F1B needs a multiple of pp (" + std::to_string(pp) + ")"
                    : "layout: no schedule for pp=" + std::to_string(pp) + ", vp=" + std::to_string(vp);
    return out;
  }
  const StageLinks links(layout, gpus_per_node, out);
  StepGraph graph(costs, layout, m, table, links, options);
  const int num_links = share_host_cores(graph.tasks(), costs, layout, gpus_per_node, links);
  Engine engine(graph.tasks(), pp, num_links, options.contention);
  if (!engine.run()) {
    out.error = "internal: the task graph did not run to completion";
    return out;
  }
  out.num_events = engine.processed();
  summarize_step(graph.tasks(), pp, costs.dp_hidden_cost, costs.p2p_copy_s, out);
  record_activation_memory(graph, costs, pp, m, options.record_timeline, out);
  if (options.record_timeline) record_timeline(graph.tasks(), out);
  return out;
}

}  // namespace capplan
