// The run contract: TrainOptions::to_argv() and TrainOptions::parse() are inverses, and parse()
// reports every mistake in one pass, naming each flag.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/train_options.h"

namespace capplan::rt {
namespace {

Diagnostics parse_vector(const std::vector<std::string>& flags, TrainOptions* out) {
  std::vector<const char*> argv = {"capplan-train"};
  for (const auto& f : flags) argv.push_back(f.c_str());
  return TrainOptions::parse(int(argv.size()), argv.data(), out);
}

// Expectation: options with every kind of field set away from its default (layout knobs,
// switches, numbers with fractions, lists, paths with spaces) come back field for field from
// parse(to_argv()).
TEST(TrainOptions, ArgvRoundTrip) {
  TrainOptions o;
  o.model = "/runs/a b/model.yaml";
  o.layout.dp = 2, o.layout.tp = 2, o.layout.pp = 2, o.layout.vp = 2, o.layout.mbs = 2;
  o.layout.zero = 1, o.layout.recompute = Recompute::Selective, o.layout.sp = true, o.layout.offload = true;
  o.layout.order = "TPD", o.layout.schedule = Schedule::Interleaved;
  o.gbs = 16, o.steps = 7, o.seq_len = 96, o.seed = 99;
  o.optimizer.lr = 1.5e-4, o.optimizer.min_lr_ratio = 0.05, o.optimizer.warmup_steps = 3;
  o.optimizer.weight_decay = 0.01, o.optimizer.clip = 0.5, o.optimizer.beta1 = 0.8, o.optimizer.beta2 = 0.99;
  o.data = "/data/shards", o.checkpoint_dir = "/runs/ck", o.checkpoint_every = 2, o.resume = "never";
  o.resume_override = {"lr", "data"}, o.metrics = "/runs/m.jsonl", o.threads = 3;
  o.thread_split = "kernel", o.kill_at_step = 4, o.dump_grads = "/tmp/g.bin";

  TrainOptions back;
  const Diagnostics d = parse_vector(o.to_argv(), &back);
  ASSERT_FALSE(d.has_errors()) << d.to_string();
  EXPECT_EQ(back.model, o.model);
  EXPECT_EQ(back.layout.dp, 2);
  EXPECT_EQ(back.layout.tp, 2);
  EXPECT_EQ(back.layout.pp, 2);
  EXPECT_EQ(back.layout.vp, 2);
  EXPECT_EQ(back.layout.mbs, 2);
  EXPECT_EQ(back.layout.zero, 1);
  EXPECT_EQ(back.layout.recompute, Recompute::Selective);
  EXPECT_TRUE(back.layout.sp);
  EXPECT_TRUE(back.layout.offload);
  EXPECT_EQ(back.layout.order, "TPD");
  EXPECT_EQ(back.layout.schedule, Schedule::Interleaved);
  EXPECT_EQ(back.gbs, 16);
  EXPECT_EQ(back.steps, 7);
  EXPECT_EQ(back.seq_len, 96);
  EXPECT_EQ(back.seed, 99u);
  EXPECT_EQ(back.optimizer.lr, 1.5e-4);
  EXPECT_EQ(back.optimizer.min_lr_ratio, 0.05);
  EXPECT_EQ(back.optimizer.warmup_steps, 3);
  EXPECT_EQ(back.optimizer.weight_decay, 0.01);
  EXPECT_EQ(back.optimizer.clip, 0.5);
  EXPECT_EQ(back.optimizer.beta1, 0.8);
  EXPECT_EQ(back.optimizer.beta2, 0.99);
  EXPECT_EQ(back.optimizer.total_steps, 7);
  EXPECT_EQ(back.data, o.data);
  EXPECT_EQ(back.checkpoint_dir, o.checkpoint_dir);
  EXPECT_EQ(back.checkpoint_every, 2);
  EXPECT_EQ(back.resume, "never");
  EXPECT_EQ(back.resume_override, o.resume_override);
  EXPECT_EQ(back.metrics, o.metrics);
  EXPECT_EQ(back.threads, 3);
  EXPECT_EQ(back.thread_split, "kernel");
  EXPECT_EQ(back.kill_at_step, 4);
  EXPECT_EQ(back.dump_grads, o.dump_grads);

  // Defaults write only what the trainer needs to know and read back as the defaults.
  TrainOptions plain;
  plain.model = "m.yaml";
  TrainOptions plain_back;
  ASSERT_FALSE(parse_vector(plain.to_argv(), &plain_back).has_errors());
  EXPECT_EQ(plain_back.to_argv(), plain.to_argv());
  EXPECT_EQ(plain_back.optimizer.lr, TrainOptions().optimizer.lr);
  EXPECT_EQ(plain_back.resume, "auto");
}

// Expectation: --cp, --ep and --moe-aux-loss-coeff come back from parse(to_argv()); ep must
// divide dp * cp, and cp does not combine with --sp (each named).
TEST(TrainOptions, ContextAndExpertFlagsRoundTrip) {
  TrainOptions o;
  o.model = "moe.yaml";
  o.layout.dp = 2, o.layout.cp = 4, o.layout.ep = 8, o.layout.order = "DPECT";
  o.moe_aux_loss_coeff = 0.003;
  TrainOptions back;
  const Diagnostics d = parse_vector(o.to_argv(), &back);
  ASSERT_FALSE(d.has_errors()) << d.to_string();
  EXPECT_EQ(back.layout.cp, 4);
  EXPECT_EQ(back.layout.ep, 8);
  EXPECT_EQ(back.layout.gpus(), 8);
  EXPECT_EQ(back.layout.order, "DPECT");
  EXPECT_EQ(back.moe_aux_loss_coeff, 0.003);
  EXPECT_EQ(back.to_argv(), o.to_argv());
  TrainOptions bad;
  const Diagnostics e =
      parse_vector({"--model", "m.yaml", "--dp", "2", "--cp", "2", "--ep", "3", "--tp", "2", "--sp"}, &bad);
  const std::string text = e.to_string();
  EXPECT_NE(text.find("--ep: ep 3 does not divide dp * cp = 2 * 2 = 4"), std::string::npos) << text;
  EXPECT_NE(text.find("--cp: context parallelism with sequence parallelism"), std::string::npos) << text;
}

// Expectation: four mistakes give four errors in one pass, each naming its flag: an unknown flag
// with a "did you mean", a bad number, a value out of range and gbs not divisible by dp x mbs;
// --seq-len is not a flag (the one spelling is --seq).
TEST(TrainOptions, EveryMistakeInOnePass) {
  TrainOptions o;
  const Diagnostics d =
      parse_vector({"--model", "m.yaml", "--stepz", "3", "--lr", "fast", "--zero", "4", "--dp", "2",
                    "--gbs", "3", "--seq-len", "64"},
                   &o);
  const std::string text = d.to_string();
  EXPECT_NE(text.find("<command line>: error: --stepz: unknown flag (did you mean '--steps'?)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("--lr: expected a finite number, found 'fast'"), std::string::npos) << text;
  EXPECT_NE(text.find("--zero: must be between 0 and 3, found 4"), std::string::npos) << text;
  EXPECT_NE(text.find("--gbs: 3 is not divisible by dp * mbs = 2 * 1 = 2"), std::string::npos) << text;
  EXPECT_NE(text.find("--seq-len: unknown flag"), std::string::npos) << text;
  int errors = 0;
  for (const auto& item : d.items()) errors += item.severity == Severity::Error;
  EXPECT_EQ(errors, 5);
}

// Expectation: as the trainer always took them, a flag given again replaces the earlier value
// (callers append overrides to a base command line): --mbs 1 then --mbs 2 runs mbs 2.
TEST(TrainOptions, LaterFlagReplacesEarlier) {
  TrainOptions o;
  const Diagnostics d = parse_vector({"--model", "m.yaml", "--mbs", "1", "--gbs", "8", "--mbs", "2"}, &o);
  EXPECT_FALSE(d.has_errors()) << d.to_string();
  EXPECT_EQ(o.layout.mbs, 2);
}

}  // namespace
}  // namespace capplan::rt
