// Ranks of a CPU host that outnumber its cores: the cost model's step when they time-share the
// cores. Only for device profiles of CPU ranks that know their host's cores (a GPU is one rank's
// device, and the datasheet path is not touched).
#include <algorithm>
#include <numeric>

#include "cost_model_detail.h"

namespace capplan::detail {

// Processor sharing (Kleinrock 1967, "Time-shared systems: a theoretical treatment", J. ACM 14(2);
// the Linux CFS scheduler's stated model, Documentation/scheduler/sched-design-CFS.rst: "an
// ideal, precise multi-tasking CPU" running n runnable tasks each at 1/n of its speed): n busy
// ranks on c < n cores each progress at c/n of a core, and a rank that waits (a pipeline bubble,
// a collective polled with yielding, as capplan-train asks Open MPI to) gives its core to the
// others. The host then cannot finish its ranks' work faster than its cores do it:
//   T >= W_host / c + X,      W_host = the compute-stream work of all the host's ranks,
// where X, what does not overlap with that work, is the critical rank's communication (tp, pp,
// dp, ep, cp, offload), less its waits for a neighbour that the cores spend on the others (a
// context ring's: the rank's time, not the host's). Nor faster than with a core for each rank
// (the dedicated step T_d). So
//   T = max(T_d, W_host / c + X).
// With every rank busy all the time (pp = 1) this stretches the busy terms by n / c (4 ranks on
// 2 cores double a compute-bound step); with a pipeline the bubbles' cores go to the other
// stages, so the step grows by less than n / c. The busy terms of the critical rank stretch by
// at most n / c; what is left of T is its bubble. A profile measured with more ranks than cores
// (p > c) holds times already stretched by p / c: they are first brought back to a core each.
// A pipeline's fill and drain run fewer stages than there are ranks, and its stages' work differs
// (the embedding, the LM head), so the cores are not all busy and W / c under-counts: the step is
// also at least the pipeline walked slot by slot through its schedule under processor sharing
// (`pipeline_s`, StepEvaluation::pipeline_walk in cost_model.cpp, which has the formula). pp 4
// of the 4-layer, 256-wide model on 2 cores: 381 ms with it, 347 without, 385 simulated (the
// simulator shares the cores task by task), 370 measured.
// Where the stretch shows depends on how long a rank computes between two waits, against the
// scheduler's time slice (CFS: sched_latency 6 ms x (1 + log2 cores), shared by the runnable
// tasks, Documentation/scheduler/sched-design-CFS.rst):
//  - ranks in lockstep (a tensor-parallel group meets in a collective every half layer, a few ms
//    apart): a rank's compute between two collectives fits in its slice, so it runs at a core's
//    speed while the others wait in the collective, and they take turns. The busy terms keep
//    their dedicated time and the stretch is the group's collective wait (its tp_comm). Where more
//    ranks are runnable between two
//    collectives than there are cores (several groups on the host), the compute itself
//    stretches too: the profile measures the ranks' time in their GEMMs in lockstep over a
//    core's (compute_stretch, by ranks and group size), and the compute takes it within the
//    step, the wait the rest. The profile's segments are the training's (the halves of a
//    layer's forward, and of its backward, twice as long): on this 2-core host the stretch
//    measured 1.20-1.27 for 4 ranks and 1.58-1.80 for 8 (1.03-1.09 with forward segments only),
//    and dp 2 x tp 2 x pp 2 computed 169 ms against 161 predicted (116 before), dp 2 x tp 2
//    215 against 202;
//  - otherwise (data- and pipeline-parallel ranks compute whole passes between messages, tens of
//    ms; a context ring's and an expert group's ranks whole blocks and layers) the ranks run side
//    by side at c/n of a core, and the forward and backward stretch. Side by side the cores do
//    less than the ideal (the scheduler's switches between ranks and the caches they share; the
//    two are not measured apart): the profile measures the fraction e as a whole
//    (free_efficiency: the ranks' layers all at once against the same layers computed by `c` of
//    them while the others sleep), and the host's cores do c e cores' work,
//    T = max(T_d, W_host / (c e) + X), the pipeline's slots likewise. On this 2-core host e
//    measured 0.99-1.00 for 4 ranks and 0.97-0.99 for 8 (one profile, and what two benchmark
//    runs' profiles priced); over the seven benchmark runs before it data-parallel runs of 4 and
//    8 ranks computed 1.04 and 1.09 times dp 2's time (medians), where the ideal gives 1.01 and
//    1.03: the measured e closes part of that;
//  - the optimizer step: every rank enters it as it leaves the collective before it (the
//    data-parallel gradients' all-gather, or the gradient norm's sum), so the host's ranks take
//    their steps at once. How they share the cores then is the host's: on a 2-core AMD EPYC host
//    the step kept its dedicated time (4.8 and 6.4 ms for dp 4 and dp 8 against 5.0 for dp 2,
//    measured; why, not); on a 2-core Intel Xeon host it took
//    10.7 and 17.8 ms against 6.6 predicted, 1.6 and 2.7 times (a step of a few ms run to its end
//    in the scheduler's slice while the others wait their turn: a rank's mean wait in a queue of
//    k per core is (k - 1) / 2 steps, 1.5 and 2.5 times in all). So the profile measures it
//    (SharedCoresTiming's optimizer_s over optimizer_alone_s: the ranks' mean time in the step
//    right after their gradient exchange against a core each: 1.74-1.78 for 4 ranks, 2.78-3.02
//    for 8 in two profiles there), and where that exchange is the step's last collective (tp, pp
//    and ep 1) the critical rank's step takes that stretch k (1 <= k <= n / (c e)); the cores'
//    time its step did not take (n / c - k of it) stays in the step: the passes take it (or the
//    lockstep wait). Where the gradient norm's sum over the tensor-, pipeline-parallel or expert
//    groups comes after it, the runs there kept about their dedicated time (dp 2 x tp 2 4.2 ms
//    against 3.6, dp 2 x pp 2 6.1 against 4.5, tp 4 2.6 against 1.8, dp 2 x tp 2 x pp 2 2.3
//    against 2.2), though the same step timed after a sum in pairs took 1.61 and 2.49 times its
//    own: the sum alone is not what spreads them, so those keep the dedicated time (k = 1).
// The data-parallel collectives, which all ranks run at once and whose copies and sums are CPU
// work, stretch by n / c too, unless the profile timed the exchange among as many ranks on the
// shared cores (SharedExchangeTiming, exchange_s in cost_model.cpp), which is the host's time. Measured on 2 cores (tests/bench/bench_local_fidelity.sh): tp 4
// computes in 310-340 ms with 320-380 ms in tp_comm, dp 4 and dp 8 compute in the stretched time
// of dp 2, and dp 4's gradient all-reduce took 33 ms where dp 2's took 13.
// A collective of ranks in lockstep is not over when its bytes have moved: it waits for the last
// rank to arrive, and among ranks that take turns on the cores each exchange of Open MPI's
// shared-memory all-reduce needs its partner on a core, a turn of the scheduler. `capplan profile
// --measure` times both (capplan-train measure: the ranks compute a layer's forward and backward
// GEMMs with and without an all-reduce of the activation after each half of each pass, as
// tensor-parallel layers meet, with a core each and, in two more runs,
// at twice and four times the cores, in groups of 2, 4, ... ranks). On this 2-core host an all-reduce of the 256 KB activation held ranks
// in lockstep 0.1-0.9 ms (mostly 0.2-0.5) taking turns and 0.08-0.19 ms with a core each, against
// 0.08 ms for the same all-reduce timed back to back. Each tensor-parallel all-reduce takes the
// measured lockstep time where it exceeds its own (lockstep_allreduce_s in cost_model.cpp, the
// shared or the dedicated measurement as the ranks are). A pipeline's hand-off on shared cores is
// the same kind of wait: the
// receiving stage naps until the message is there and then needs a core the others hold; the
// profile times it as half a ping-pong of the activation between two ranks while the others
// compute, and each transfer of the critical rank takes that time, or its copy at the shared
// cores' speed where that is longer (handoff_s: what it takes beyond the copy at a core's speed,
// which is pp_comm); that is the receiving stage's wait for the message, so it shows as bubble (the
// tied embedding's exchange between the end stages, in pp_comm too, is not a hand-off).
double shared_copy_stretch(int ranks_on_host, int cores, int profile_ranks) {
  if (cores <= 0) return 1.0;
  return std::max(1.0, double(ranks_on_host) / cores) * profile_core_share(cores, profile_ranks);
}

double profile_core_share(int cores, int profile_ranks) {
  return cores > 0 ? 1.0 / std::max(1.0, double(profile_ranks) / cores) : 1.0;
}

// A rank's threads split its work: a micro-batch's sequences over replicas of the layer when they
// divide it (cpu_batch_split: priced at the part's shapes on its threads), else every kernel
// (capplan-train's backend threads). The scaling over threads is taken as ideal, as measured
// here: one rank of the 4-layer, 256-wide model on 2 cores (2 threads) ran its compute 1.96x
// faster (mbs 1, kernels split) than the profile's ranks with a thread each. Ranks outnumbering
// the cores have a thread each and time-share them (share_host_cores).
double rank_threads_scale(const DeviceProfile& profile, int ranks_on_host) {
  if (profile.backend != "cpu" || profile.cores <= 0 || ranks_on_host <= 0) return 1.0;
  return double(profile.threads_or_default()) / cpu_rank_threads(profile.cores, ranks_on_host);
}

// capplan-train's batch split (trainer.cpp, --thread-split auto): a CPU rank with several backend
// threads and no communication inside its step (tp, pp and cp 1, ZeRO 0 or 1, no experts) runs
// each micro-batch as gcd(mbs, threads) parts of mbs / parts sequences side by side, a part's
// threads each. Its GEMMs are then the part's, with fewer rows: in one profile here the
// 4-layer, 256-wide model's forward and input-gradient GEMMs at 128 rows took 1.09-1.11x half
// their time at 256 (the LM head's 1.06x), and a rank of 2 threads ran its GEMMs 1.07x slower
// than two ranks of one thread each at mbs 2 (the fidelity benchmark's single and dp 2 layouts,
// 1.04-1.08x over three of its runs).
int cpu_batch_split(const Scenario& sc, const DeviceProfile& profile, const Layout& ly) {
  if (profile.backend != "cpu" || profile.cores <= 0 || ly.tp != 1 || ly.pp != 1 || ly.cp != 1 ||
      ly.zero > 1 || ly.mbs < 2 || sc.model.moe.enabled())
    return 1;
  const int ranks_on_host = gpus_on_a_node(sc.cluster.gpus_per_node, sc.total_gpus());
  return std::gcd(ly.mbs, cpu_rank_threads(profile.cores, ranks_on_host));
}

TimeBreakdown share_host_cores(const TimeBreakdown& dedicated, const HostSharing& host) {
  const int ranks_on_host = host.ranks_on_host, cores = host.cores, profile_ranks = host.profile_ranks;
  if (cores <= 0 || (ranks_on_host <= cores && profile_ranks <= cores)) return dedicated;
  const double d = profile_core_share(cores, profile_ranks);  // profile time -> core-seconds
  // The cores' work where the ranks outnumber them: free_efficiency (in (0, 1], measured) of the
  // processor-sharing ideal.
  const double e = ranks_on_host > cores ? host.free_efficiency : 1.0;
  const double s = std::max(1.0, double(ranks_on_host) / cores) / e;  // the most a busy rank stretches
  TimeBreakdown t = dedicated;
  // The data-parallel collectives run on every rank at once, and between CPU ranks their copies
  // and sums are the ranks' own work on the shared cores: they stretch by n / c as well. So does
  // the tied embedding's exchange (pp_comm). A pipeline's transfer does not: the receiving rank
  // copies the message out of the sender's memory right after its probe finds it, on the core it
  // woke on (measured on 2 cores, pp_comm, medians of 3 benchmark rounds: 1.3 ms for pp 4, 0.9 for
  // dp 2 x pp 2, 0.9 for tp 2 x pp 2 and 0.6 for dp 2 x tp 2 x pp 2 against 4.2, 2.2, 1.6 and 2.2
  // with the copies stretched; in the run after, 1.4, 0.9, 0.8 and 0.6 measured, so priced 1.3,
  // 1.0, 0.6 and 0.8).
  const double copy = shared_copy_stretch(ranks_on_host, cores, profile_ranks);  // d x max(1, n / c)
  if (!host.dp_comm_on_shared_cores) t.dp_comm *= copy;
  const double transfers = std::clamp(host.pp_transfers_s, 0.0, t.pp_comm);
  t.pp_comm = d * transfers + (t.pp_comm - transfers) * copy;
  // The hand-offs' extra time is spent waiting for the message in the receiving stage: bubble.
  const double handoff = std::max(0.0, host.handoff_s);
  const double busy = t.compute + t.recompute + t.optimizer;
  const double other = t.sum() - busy - t.bubble;  // X: the communication of the critical rank
  // Of which the waits the other ranks' work fills (a context ring's, cost_model_moe.cpp): the
  // rank's time, not the cores'.
  const double exposed = other - std::clamp(host.hidden_wait_s, 0.0, other);
  // The optimizer's measured stretch where the ranks outnumber the cores (at most a busy rank's).
  // The cost model sets it for data-parallel layouts only, so ranks in lockstep take it as 1 today;
  // the lockstep branch applies it all the same, so that a caller's stretch is never dropped.
  const double k = ranks_on_host > cores ? std::clamp(host.optimizer_stretch, 1.0, s) : 1.0;
  const double t_dedicated = d * (busy + (k - 1) * t.optimizer + t.bubble) + exposed + handoff;
  const double t_shared = d * host.host_busy_s / (cores * e) + exposed + handoff;
  const double t_slots = host.pipeline_s > 0 ? d * (host.pipeline_s + k * t.optimizer) + exposed + handoff : 0.0;
  const double step = std::max({t_dedicated, t_shared, t_slots});
  if (host.lockstep) {
    // The measured stretch of the compute between collectives, as far as the step leaves room.
    const double passes = d * (t.compute + t.recompute);
    // The fill and drain: their compute shares the cores as the slots' ranks do, their
    // collectives meet among those ranks (HostSharing::fill_tp_factor).
    const double bubble_tp = std::clamp(host.bubble_tp_s, 0.0, t.bubble);
    const double fill_drain = d * ((t.bubble - bubble_tp) * std::max(1.0, host.fill_drain_stretch) +
                                   bubble_tp * std::clamp(host.fill_tp_factor, 0.0, 1.0));
    const double room = step - other - handoff - fill_drain - d * k * t.optimizer;
    const double f = passes > 0 ? std::clamp(room / passes, 1.0, std::max(1.0, host.lockstep_stretch)) : 1.0;
    t.compute *= d * f;
    t.recompute *= d * f;
    t.optimizer *= d * k;
    // The fill and drain run fewer ranks than the host has; where those still outnumber the
    // cores they share them (processor sharing, as the passes do).
    t.bubble = fill_drain + handoff;
    t.tp_comm += std::max(0.0, step - t.sum());
    return t;
  }
  const double passes = t.compute + t.recompute;
  t.optimizer *= d * k;
  // The passes stretch by at most n / c, plus the share of the cores the optimizer steps did not
  // take: of n / c times the step's dedicated time, k.
  const double f_max = passes > 0 ? s + (s - k) * t.optimizer / (k * d * passes) : 1.0;
  const double f =
      passes > 0 ? std::clamp((step - other - handoff - d * t.bubble - t.optimizer) / (d * passes), 1.0, f_max)
                 : 1.0;
  t.compute *= d * f;
  t.recompute *= d * f;
  t.bubble = std::max(0.0, step - other - t.compute - t.recompute - t.optimizer);
  return t;
}

}  // namespace capplan::detail
