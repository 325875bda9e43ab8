// `capplan` with mixture-of-experts models and context parallelism, as a process: profile's total
// and active parameters, --ep/--cp through estimate, plan pins and exports, and the bad input named in
// the README (exit 2, the field named).
#include <gtest/gtest.h>

#include <string>

#include "support/run_program.h"

namespace {

using CliRun = capplan::test::ProgramRun;

CliRun run_cli(const std::string& args) { return capplan::test::run_program(CAPPLAN_CLI, args); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

::testing::AssertionResult refused(const CliRun& r, const std::string& message) {
  if (r.status == 2 && has(r.err, message)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "status " << r.status << ", expected 2 and '" << message
                                       << "' on stderr:\n" << r.err;
}

TEST(CliMoe, ProfileReportsTotalAndActiveParameters) {
  const CliRun r = run_cli("profile --model mixtral-8x7b");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "46.70B parameters, 12.88B active per token")) << r.out;
  EXPECT_TRUE(has(r.out, "8 experts, top_k 2")) << r.out;
  const CliRun j = run_cli("profile --model deepseek-v3-671b --json");
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_TRUE(has(j.out, "\"active_params\"")) << j.out;
  EXPECT_TRUE(has(j.out, "\"moe_layers\": 58")) << j.out;
}

TEST(CliMoe, LatentAttentionIsCountedAndNotMeasured) {
  // DeepSeek-V3's preset carries its latent attention: 671.03 B parameters (the report: 671 B),
  // the latent's figures printed and in the JSON; measuring it is refused (capplan-train's
  // kernels are plain multi-head attention), exit 2, the flag and the reason named.
  const CliRun r = run_cli("profile --model deepseek-v3-671b");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "671.03B parameters")) << r.out;
  EXPECT_TRUE(has(r.out, "latent attention: kv_lora_rank 512, q_lora_rank 1536, query-key heads 128 + 64 rotary, "
                         "value heads 128")) << r.out;
  const CliRun j = run_cli("profile --model deepseek-v3-671b --json");
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_TRUE(has(j.out, "\"kv_lora_rank\": 512")) << j.out;
  EXPECT_TRUE(refused(run_cli("profile --measure --model tests/data/good/model_mla.yaml"),
                      "--measure: latent-small has multi-head latent attention (mla)"));
  // An estimate of it on H100s with FlashAttention at the query-key head of 192.
  const CliRun e = run_cli("estimate --model deepseek-v3-671b --cluster p5.48xlarge --nodes 64 --dp 32 --tp 1 "
                           "--pp 16 --ep 32 --zero 1 --mbs 1 --gbs 4096 --order PDT --attention flash");
  EXPECT_EQ(e.status, 0) << e.err;
}

TEST(CliMoe, MultiTokenPredictionIsCountedApartAndCosted) {
  // DeepSeek-V3's preset trains one multi-token prediction module: the model stays 671.03 B, the
  // module's 11.61 B printed apart and listed after the head, in the JSON too; `capplan models`
  // says it; an estimate with the module is slower than the same model without it (a copy of the
  // preset with mtp_layers 0).
  const CliRun r = run_cli("profile --model deepseek-v3-671b");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "671.03B parameters")) << r.out;
  EXPECT_TRUE(has(r.out, "multi-token prediction: 1 module, 11.61B parameters beside the model's")) << r.out;
  EXPECT_TRUE(has(r.out, "\nmtp.0            mtp                11.61B")) << r.out;
  const CliRun j = run_cli("profile --model deepseek-v3-671b --json");
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_TRUE(has(j.out, "\"mtp_layers\": 1")) << j.out;
  EXPECT_TRUE(has(j.out, "\"kind\": \"mtp\"")) << j.out;
  EXPECT_TRUE(has(run_cli("models").out, "1 multi-token prediction module"));
  const std::string layout = " --cluster p5.48xlarge --nodes 64 --dp 32 --tp 1 --pp 16 --ep 32 --zero 1 --mbs 1 "
                             "--gbs 4096 --order PDT --attention flash --json";
  const CliRun with = run_cli("estimate --model deepseek-v3-671b" + layout);
  ASSERT_EQ(with.status, 0) << with.err;
  const CliRun without = run_cli("estimate --model tests/data/good/deepseek-v3-no-mtp.yaml" + layout);
  ASSERT_EQ(without.status, 0) << without.err;
  auto step = [](const std::string& json) {
    const size_t at = json.find("\"step_time_s\": ");
    return at == std::string::npos ? -1.0 : std::stod(json.substr(at + 15));
  };
  EXPECT_GT(step(with.out), step(without.out)) << with.out << without.out;
  EXPECT_GT(step(without.out), 0) << without.out;
}

TEST(CliMoe, LocalAttentionIsSaidInTheProfile) {
  // Llama 4 Maverick's chunks of 8192 at 65536 tokens: 36 of its 48 layers local (every 4th
  // global); at its chunk's length none is; Gemma 2's window on every other layer, in the JSON too.
  const std::string maverick = "profile --model tests/data/good/hf-moe/llama4-maverick-config.json";
  const CliRun r = run_cli(maverick + " --seq 65536");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "local attention: chunks of 8192 tokens, 36 of 48 layers local at seq 65536")) << r.out;
  const CliRun whole = run_cli(maverick + " --seq 8192");
  EXPECT_TRUE(has(whole.out, "0 of 48 layers local at seq 8192 (the span covers the sequence")) << whole.out;
  const CliRun j = run_cli("profile --model gemma2-9b --json");
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_TRUE(has(j.out, "\"sliding_window\": 4096")) << j.out;
  EXPECT_TRUE(has(j.out, "\"local_layers\": 21")) << j.out;
}

TEST(CliMoe, EstimateTakesEpAndCp) {
  const CliRun r = run_cli(
      "estimate --model mixtral-8x7b --cluster p5.48xlarge --nodes 8 --dp 16 --tp 1 --pp 4 --ep 8 "
      "--zero 1 --mbs 1 --gbs 256 --order PDT --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"ep\": 8")) << r.out;
  EXPECT_TRUE(has(r.out, "\"ep_comm\"")) << r.out;
  const CliRun c = run_cli(
      "estimate --model llama3-8b --cluster p5.48xlarge --nodes 2 --dp 2 --tp 2 --pp 1 --cp 4 "
      "--seq 32768 --sp --mbs 1 --gbs 16");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_TRUE(has(c.out, "cp 4")) << c.out;
  EXPECT_TRUE(has(c.out, "cp_comm")) << c.out;
}

TEST(CliMoe, BadInputNamesTheField) {
  // ep not dividing the experts.
  EXPECT_TRUE(refused(run_cli("estimate --model mixtral-8x7b --cluster p5.48xlarge --nodes 1 --dp 6 "
                              "--tp 1 --pp 1 --ep 3 --mbs 1 --gbs 6 --gpus 6"),
                      "ep = 3 must divide experts = 8"));
  // cp: 2*cp not dividing the sequence.
  EXPECT_TRUE(refused(run_cli("estimate --model llama3-8b --cluster p5.48xlarge --nodes 1 --dp 1 "
                              "--tp 1 --pp 1 --cp 3 --mbs 1 --gbs 1 --gpus 3 --seq 8192"),
                      "cp = 3: 2*cp = 6 must divide the sequence length 8192"));
  // top_k over the experts, in a model file: file, line, key.
  EXPECT_TRUE(refused(run_cli("profile --model tests/data/bad/model_moe_top_k.yaml"),
                      "model_moe_top_k.yaml:9:10: error: model.moe.top_k: must be <= experts (4), found 6"));
  // A config.json whose MoE type is not known: named, not guessed.
  EXPECT_TRUE(refused(run_cli("profile --model tests/data/bad/hf_config_unknown_moe.json"),
                      "model_type 'dbrx' is not known"));
  // A pin on a dense model.
  EXPECT_TRUE(refused(run_cli("plan --model gpt3-1.3b --cluster p4d.24xlarge --nodes 1 --gbs 64 --fix ep=2"),
                      "ep=2 needs an MoE model"));
}

TEST(CliMoe, PlanAndMegatronExport) {
  const std::string dir = ::testing::TempDir();
  const CliRun p = run_cli("plan --model mixtral-8x7b --cluster p5.48xlarge --nodes 8 --gbs 256 "
                           "--framework megatron-core --fix ep=8,pp=4 --top 3 --save " + dir + "/moe-plan.yaml");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(has(p.out, "ep 8")) << p.out;
  const CliRun e = run_cli("export --plan " + dir + "/moe-plan.yaml --format megatron");
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(has(e.out, "--expert-model-parallel-size 8")) << e.out;
  EXPECT_TRUE(has(e.out, "--num-experts 8")) << e.out;
  EXPECT_TRUE(has(e.out, "--moe-router-topk 2")) << e.out;
  const CliRun d = run_cli("export --plan " + dir + "/moe-plan.yaml --format deepspeed");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_TRUE(has(d.out + d.err, "ep_size=8")) << d.out << d.err;
}

}  // namespace
