// Step simulation (step_simulation.h). A task graph is built from the schedule tables
// (planner/schedule.h) and the per-task costs (planner/cost_model.h), then run by a
// discrete-event loop: a task starts when its dependencies are done and, on an ordered stream
// (compute, comm, PCIe), when the tasks queued before it are done, like a CUDA stream. Transfers
// over shared links progress at 1/n of their stand-alone rate while n transfers share the
// busiest link they cross (fair sharing, as TCP/IB flows converge to); the stand-alone rate is the
// one the cost model priced, so without contention a transfer takes exactly its cost-model time.
#include "simulator/step_simulation.h"

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
  }
  return "?";
}

int placement_rank(const std::string& order, const Layout& layout, int d, int p, int t) {
  int rank = 0;
  for (char c : order) {
    switch (c) {
      case 'D': rank = rank * layout.dp + d; break;
      case 'P': rank = rank * layout.pp + p; break;
      case 'T': rank = rank * layout.tp + t; break;
      default: break;
    }
  }
  return rank;
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
  double work_s = 0;           // stand-alone duration
  int links[2] = {-1, -1};     // shared links crossed (contention), -1 = none
  int deps = 0;                // unfinished dependencies
  int last_dep = -1;           // the dependency that finished last (for attribution)
  std::vector<int> succ;
  double start_s = -1;
  double end_s = -1;
  double remaining_s = 0;      // shared transfers: stand-alone seconds still to go
  double rate = 1;
};

bool ordered(SimStream s) { return s == SimStream::Compute || s == SimStream::Comm || s == SimStream::Pcie; }

class Engine {
 public:
  Engine(std::vector<Task>& tasks, int stages, int links, bool contention)
      : tasks_(tasks), queues_(size_t(stages) * kSimStreams), busy_(queues_.size(), 0),
        head_(queues_.size(), 0), link_load_(size_t(std::max(links, 0)), 0),
        contention_(contention) {
    for (int i = 0; i < int(tasks_.size()); ++i) {
      const Task& t = tasks_[i];
      if (ordered(t.stream)) queues_[queue_of(t)].push_back(i);
    }
  }

  // Runs to completion; returns false when some task never ran (a cycle: a bug in the graph).
  bool run() {
    for (int i = 0; i < int(tasks_.size()); ++i) try_start(i);
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
      for (int l : t.links) {
        if (l >= 0) ++link_load_[size_t(l)];
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
    for (int l : tasks_[id].links) {
      if (l >= 0) --link_load_[size_t(l)];
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
      int n = 1;
      for (int l : t.links) {
        if (l >= 0) n = std::max(n, link_load_[size_t(l)]);
      }
      t.rate = 1.0 / n;
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
  std::vector<int> link_load_;
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
    if (on < 0) return;
    tasks_[on].succ.push_back(id);
    ++tasks_[id].deps;
  }

 private:
  std::vector<Task>& tasks_;
};

}  // namespace

StepSimulation simulate_step(const StepCosts& costs, const Layout& layout, int gpus_per_node,
                             int64_t num_microbatches, const StepSimulationOptions& options) {
  StepSimulation out;
  const int pp = layout.pp;
  const int vp = layout.schedule == Schedule::Interleaved ? layout.vp : 1;
  const int chunks = pp * vp;
  if (pp < 1 || vp < 1 || layout.dp < 1 || layout.tp < 1) {
    out.error = "layout: dp, tp, pp and vp must be >= 1";
    return out;
  }
  if (num_microbatches < 1) {
    out.error = "num_microbatches: must be >= 1 (gbs must be a multiple of dp * mbs)";
    return out;
  }
  if (num_microbatches > (int64_t(1) << 24)) {
    out.error = "num_microbatches: too many to simulate (" + std::to_string(num_microbatches) + ")";
    return out;
  }
  if (int(costs.chunks.size()) != chunks) {
    out.error = "step costs: expected pp * vp = " + std::to_string(chunks) + " chunks, found " +
                std::to_string(costs.chunks.size());
    return out;
  }
  if (gpus_per_node < 1) gpus_per_node = 1;
  const int m = int(num_microbatches);
  const auto table = build_schedule(layout.schedule, pp, vp, m);
  if (table.empty()) {
    out.error = layout.schedule == Schedule::Interleaved
                    ? "num_microbatches: interleaved 1F1B needs a multiple of pp (" + std::to_string(pp) + ")"
                    : "layout: no schedule for pp=" + std::to_string(pp) + ", vp=" + std::to_string(vp);
    return out;
  }

  // Placement: the simulated GPU of stage s is (dp 0, stage s, tp 0).
  out.stage_rank.resize(size_t(pp));
  out.stage_node.resize(size_t(pp));
  std::map<int, int> node_link;  // node -> NIC link id
  std::vector<bool> dp_crosses(size_t(pp), false);
  for (int s = 0; s < pp; ++s) {
    out.stage_rank[s] = placement_rank(layout.order, layout, 0, s, 0);
    out.stage_node[s] = out.stage_rank[s] / gpus_per_node;
    node_link.emplace(out.stage_node[s], int(node_link.size()));
    const int far = placement_rank(layout.order, layout, layout.dp - 1, s, 0) / gpus_per_node;
    dp_crosses[s] = far != out.stage_node[s];
  }
  const int nic0 = 0;
  const int nvl0 = int(node_link.size());
  const int num_links = nvl0 + pp;
  auto nic = [&](int s) { return nic0 + node_link[out.stage_node[s]]; };
  auto nvl = [&](int s) { return nvl0 + s; };

  std::vector<Task> tasks;
  tasks.reserve(size_t(pp) * vp * m * 10 + 16 * size_t(pp));
  GraphBuilder g(tasks);

  // Index: (microbatch, global chunk) -> task ids.
  const size_t n_mc = size_t(m) * chunks;
  std::vector<int> fwd_first(n_mc, -1), fwd_done(n_mc, -1), send_fwd(n_mc, -1);
  std::vector<int> bwd_first(n_mc, -1), bwd_done(n_mc, -1), send_bwd(n_mc, -1);
  std::vector<int> weight_task(n_mc, -1), offload_task(n_mc, -1), reload_task(n_mc, -1);
  auto idx = [&](int mb, int gc) { return size_t(mb) * chunks + size_t(gc); };

  // Tasks in stream order per stage, following the schedule table. Reloads prefetch one
  // backward ahead: the reload for a backward may start once the compute stream has reached the
  // previous backward (it waits for the task just before it), so at most two offloaded chunks
  // are back on the GPU at a time.
  for (int s = 0; s < pp; ++s) {
    int last_compute = -1;      // last compute task created on this stage
    int prev_bwd_pred = -1;     // compute task just before the previous backward
    for (const PipelineAction& a : table[s]) {
      const int gc = a.chunk * pp + s;
      const ChunkCosts& c = costs.chunks[size_t(gc)];
      const size_t k = idx(a.microbatch, gc);
      if (a.pass == Pass::Forward) {
        const int f = g.add(SimTaskKind::Forward, SimStream::Compute, s, a.microbatch, gc, c.forward_s);
        int last = f;
        if (c.tp_comm_forward_s > 0) {
          last = g.add(SimTaskKind::TpComm, SimStream::Compute, s, a.microbatch, gc, c.tp_comm_forward_s);
        }
        fwd_first[k] = f;
        fwd_done[k] = last;
        last_compute = last;
        if (c.offload_s > 0 || c.reload_s > 0) {
          offload_task[k] = g.add(SimTaskKind::Offload, SimStream::Pcie, s, a.microbatch, gc, c.offload_s, {last});
        }
      } else {
        int first = -1, last = -1;
        if (offload_task[k] >= 0) {
          reload_task[k] = g.add(SimTaskKind::Reload, SimStream::Pcie, s, a.microbatch, gc, c.reload_s,
                                 {offload_task[k], prev_bwd_pred});
        }
        prev_bwd_pred = last_compute;
        if (c.recompute_s > 0) {
          first = last = g.add(SimTaskKind::Recompute, SimStream::Compute, s, a.microbatch, gc, c.recompute_s);
        }
        const int bi = g.add(SimTaskKind::BackwardInput, SimStream::Compute, s, a.microbatch, gc, c.backward_input_s);
        if (first < 0) first = bi;
        last = bi;
        if (c.tp_comm_backward_s > 0) {
          last = g.add(SimTaskKind::TpComm, SimStream::Compute, s, a.microbatch, gc, c.tp_comm_backward_s);
        }
        const int bw = g.add(SimTaskKind::BackwardWeight, SimStream::Compute, s, a.microbatch, gc, c.backward_weight_s);
        weight_task[k] = bw;
        last_compute = bw;
        bwd_first[k] = first;
        bwd_done[k] = bw;
        if (reload_task[k] >= 0) g.depend(first, reload_task[k]);
      }
    }
  }

  // DP gradients: buckets all-reduced (ZeRO: reduce-scattered) on the comm stream as the last
  // micro-batch's weight gradients of each chunk complete (Megatron-LM overlap_grad_reduce /
  // PyTorch DDP buckets). The last backward's weight-gradient task is cut into equal pieces, one
  // per bucket. ZeRO >= 1 splits the cost-model time in halves: reduce-scatter in the buckets,
  // parameter all-gather after the optimizer (a ring all-reduce is exactly these two halves).
  const bool has_dp = layout.dp > 1 && costs.dp_comm_s > 0;
  const int total_buckets = has_dp ? std::max(1, costs.dp_buckets) : 0;
  const double dp_part = layout.zero >= 1 ? 0.5 : 1.0;
  std::vector<std::vector<int>> stage_buckets(static_cast<size_t>(pp));
  if (has_dp) {
    for (int s = 0; s < pp; ++s) {
      // Chunks of this stage in the order their last backward runs.
      std::vector<std::pair<int, int>> last_bwd;  // (chunk local, microbatch)
      std::vector<int> seen(size_t(vp), -1);
      for (const PipelineAction& a : table[s]) {
        if (a.pass == Pass::Backward) seen[size_t(a.chunk)] = a.microbatch;
      }
      std::vector<int> order_pos;
      for (int i = int(table[s].size()) - 1; i >= 0; --i) {
        const auto& a = table[s][size_t(i)];
        if (a.pass == Pass::Backward && seen[size_t(a.chunk)] == a.microbatch &&
            std::find(order_pos.begin(), order_pos.end(), a.chunk) == order_pos.end()) {
          order_pos.insert(order_pos.begin(), a.chunk);
        }
      }
      int bucket = 0;
      for (size_t ci = 0; ci < order_pos.size(); ++ci) {
        const int c = order_pos[ci];
        const int gc = c * pp + s;
        const int nb = total_buckets / vp + (int(ci) < total_buckets % vp ? 1 : 0);
        if (nb == 0) continue;
        const int w = weight_task[idx(seen[size_t(c)], gc)];
        const double piece = tasks[w].work_s / nb;
        // Re-use the original task as the first piece and insert the rest after it in stream
        // order: the compute queue is built from task ids, so pieces become separate tasks
        // chained by dependencies and inserted in the queue by the engine (see below).
        tasks[w].work_s = piece;
        int prev = w;
        for (int b = 0; b < nb; ++b) {
          int piece_id = prev;
          if (b > 0) {
            piece_id = g.add(SimTaskKind::BackwardWeight, SimStream::Compute, s, seen[size_t(c)], gc, piece, {prev});
            tasks[piece_id].bucket = -2 - w;  // marker: queue right after task w's previous piece
          }
          const int d = g.add(SimTaskKind::DpComm, SimStream::Comm, s, -1, gc,
                              costs.dp_comm_s * dp_part / total_buckets, {piece_id});
          tasks[d].bucket = bucket++;
          tasks[d].links[0] = dp_crosses[s] ? nic(s) : nvl(s);
          stage_buckets[s].push_back(d);
          prev = piece_id;
        }
        bwd_done[idx(seen[size_t(c)], gc)] = prev;
      }
    }
  }

  // Point-to-point sends between consecutive global chunks; Megatron-LM sends the activation
  // gradient after the whole backward of the chunk (input and weight gradients).
  auto p2p_links = [&](Task& t, int from, int to) {
    if (from == to) {
      t.work_s = 0;  // same GPU (pp == 1 with several chunks): no transfer
    } else if (out.stage_node[from] != out.stage_node[to]) {
      t.links[0] = nic(from);
      t.links[1] = nic(to);
    } else {
      t.links[0] = nvl(from);
    }
  };
  for (int mb = 0; mb < m; ++mb) {
    for (int gc = 0; gc < chunks; ++gc) {
      const int s = gc % pp;
      const size_t k = idx(mb, gc);
      if (gc + 1 < chunks) {
        const int id = g.add(SimTaskKind::SendForward, SimStream::SendNext, s, mb, gc, costs.p2p_s, {fwd_done[k]});
        p2p_links(tasks[id], s, (gc + 1) % pp);
        send_fwd[k] = id;
        g.depend(fwd_first[idx(mb, gc + 1)], id);
      }
      if (gc > 0) {
        const int id = g.add(SimTaskKind::SendBackward, SimStream::SendPrev, s, mb, gc, costs.p2p_s, {bwd_done[k]});
        p2p_links(tasks[id], s, (gc - 1) % pp);
        send_bwd[k] = id;
        g.depend(bwd_first[idx(mb, gc - 1)], id);
      }
    }
  }

  // Optimizer step after the stage's last backward and all of its buckets; ZeRO all-gather after.
  for (int s = 0; s < pp; ++s) {
    const int o = g.add(SimTaskKind::Optimizer, SimStream::Compute, s, -1, -1, costs.optimizer_s);
    for (int d : stage_buckets[s]) g.depend(o, d);
    if (has_dp && layout.zero >= 1) {
      const int ag = g.add(SimTaskKind::ZeroAllGather, SimStream::Comm, s, -1, -1,
                           costs.dp_comm_s * (1.0 - dp_part), {o});
      tasks[ag].links[0] = dp_crosses[s] ? nic(s) : nvl(s);
    }
  }

  // Stream order: tasks were created in stream order per stage, except the extra weight pieces,
  // which must follow their first piece. Build the queues explicitly by a stable reorder.
  {
    std::vector<int> order;
    order.reserve(tasks.size());
    std::vector<std::vector<int>> extra(tasks.size());
    for (int i = 0; i < int(tasks.size()); ++i) {
      if (tasks[i].bucket <= -2) extra[size_t(-2 - tasks[i].bucket)].push_back(i);
    }
    for (int i = 0; i < int(tasks.size()); ++i) {
      if (tasks[i].bucket <= -2) continue;
      order.push_back(i);
      for (int e : extra[size_t(i)]) order.push_back(e);
    }
    for (int i : order) {
      if (tasks[i].bucket <= -2) tasks[i].bucket = -1;
    }
    // Permute tasks into `order`, remapping ids.
    std::vector<int> new_id(tasks.size());
    for (int i = 0; i < int(order.size()); ++i) new_id[size_t(order[i])] = i;
    std::vector<Task> sorted(tasks.size());
    for (int i = 0; i < int(order.size()); ++i) {
      sorted[size_t(i)] = std::move(tasks[size_t(order[i])]);
      for (int& x : sorted[size_t(i)].succ) x = new_id[size_t(x)];
    }
    tasks.swap(sorted);
    for (auto* v : {&fwd_first, &bwd_done, &offload_task, &reload_task}) {
      for (int& x : *v) {
        if (x >= 0) x = new_id[size_t(x)];
      }
    }
  }

  Engine engine(tasks, pp, num_links, options.contention);
  if (!engine.run()) {
    out.error = "internal: the task graph did not run to completion";
    return out;
  }
  out.num_events = engine.processed();

  // Step time and the critical GPU.
  std::vector<double> stage_end(size_t(pp), 0.0), compute_busy(size_t(pp), 0.0);
  for (const Task& t : tasks) {
    stage_end[size_t(t.stage)] = std::max(stage_end[size_t(t.stage)], t.end_s);
    if (t.stream == SimStream::Compute) compute_busy[size_t(t.stage)] += t.end_s - t.start_s;
  }
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

  // Breakdown on the critical GPU: its compute-stream work by kind, and each idle gap charged to
  // what it waited for (the dependency that finished last): a transfer's own duration to its
  // term, the rest of the gap to the bubble.
  {
    TimeBreakdown& b = out.breakdown_s;
    double prev_end = 0;
    const int cs = out.critical_stage;
    auto charge_gap = [&](double gap, int dep) {
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
          const double x = std::min(gap, dur);
          b.pp_comm += x;
          b.bubble += gap - x;
          break;
        }
        case SimTaskKind::DpComm:
        case SimTaskKind::ZeroAllGather: b.dp_comm += gap; break;
        case SimTaskKind::Reload:
        case SimTaskKind::Offload: b.offload += gap; break;
        default: b.bubble += gap; break;
      }
    };
    for (const Task& t : tasks) {
      if (t.stage != cs || t.stream != SimStream::Compute) continue;
      charge_gap(t.start_s - prev_end, t.last_dep);
      const double dur = t.end_s - t.start_s;
      switch (t.kind) {
        case SimTaskKind::Forward:
        case SimTaskKind::BackwardInput:
        case SimTaskKind::BackwardWeight: b.compute += dur; break;
        case SimTaskKind::Recompute: b.recompute += dur; break;
        case SimTaskKind::TpComm: b.tp_comm += dur; break;
        case SimTaskKind::Optimizer: b.optimizer += dur; break;
        default: break;
      }
      prev_end = t.end_s;
    }
    const double tail = step - prev_end;
    if (tail > 0) {
      if (has_dp && layout.zero >= 1) b.dp_comm += tail;
      else b.bubble += tail;
    }
    out.bubble_fraction = step > 0 ? b.bubble / step : 0;
  }

  // Activation memory over time per stage: a chunk's activations are allocated when its forward
  // starts and freed when its backward ends; offload frees them when the copy to host ends and
  // reload brings them back when it starts.
  out.activation_bytes_over_time.assign(size_t(pp), {});
  out.peak_activation_bytes_per_stage.assign(size_t(pp), 0.0);
  {
    std::vector<std::vector<std::pair<double, double>>> deltas(static_cast<size_t>(pp));
    for (int mb = 0; mb < m; ++mb) {
      for (int gc = 0; gc < chunks; ++gc) {
        const size_t k = idx(mb, gc);
        const int s = gc % pp;
        const double bytes = costs.chunks[size_t(gc)].activation_bytes;
        if (bytes <= 0) continue;
        deltas[size_t(s)].push_back({tasks[size_t(fwd_first[k])].start_s, bytes});
        deltas[size_t(s)].push_back({tasks[size_t(bwd_done[k])].end_s, -bytes});
        if (offload_task[k] >= 0) {
          deltas[size_t(s)].push_back({tasks[size_t(offload_task[k])].end_s, -bytes});
          deltas[size_t(s)].push_back({tasks[size_t(reload_task[k])].start_s, bytes});
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
        if (options.record_timeline) {
          if (!series.empty() && series.back().first == t) series.back().second = live;
          else series.push_back({t, live});
        }
      }
      out.peak_activation_bytes_per_stage[size_t(s)] = peak;
    }
  }

  if (options.record_timeline) {
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
      e.start_s = t.start_s;
      e.end_s = t.end_s;
      out.timeline.push_back(e);
    }
    std::stable_sort(out.timeline.begin(), out.timeline.end(),
                     [](const SimEvent& a, const SimEvent& b) { return a.start_s < b.start_s; });
  }
  return out;
}

}  // namespace capplan
