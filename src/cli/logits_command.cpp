// specstack logits: the logits of every given token, for debugging and for
// independent correctness checks. Explicit --positions drive RoPE (this is
// how a sparse prefill is fed); tokens fill KV slots 0..n-1 in order.
#include <cstdio>
#include <memory>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "model/safetensors_writer.h"

namespace specstack::cli {
namespace {

struct LogitsFlags {
  ModelFlags model;
  std::string tokens;
  std::string positions;
  std::string out;
};

int run_logits(const LogitsFlags& flags) {
  auto ids = parse_int_list(flags.tokens, "--tokens");
  if (!ids.ok()) return report_error(ids.message());
  std::vector<int32_t> positions(ids->size());
  std::iota(positions.begin(), positions.end(), 0);
  if (!flags.positions.empty()) {
    auto parsed = parse_int_list(flags.positions, "--positions");
    if (!parsed.ok()) return report_error(parsed.message());
    if (parsed->size() != ids->size()) {
      return report_error(fmt::format("--positions has {} entries but --tokens has {}",
                                      parsed->size(), ids->size()));
    }
    positions = std::move(parsed).value();
  }
  auto options = flags.model.instance_options(static_cast<int64_t>(ids->size()));
  if (!options.ok()) return report_error(options.message());
  CpuBackend backend(CpuBackendOptions{flags.model.threads});
  auto instance = ModelInstance::create(*options, backend);
  if (!instance.ok()) return report_error(instance.message());
  ModelInstance& model = **instance;
  const int64_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < ids->size(); ++i) {
    if ((*ids)[i] < 0 || (*ids)[i] >= vocab) {
      return report_error(fmt::format("--tokens: id {} out of range [0, {})", (*ids)[i], vocab));
    }
    if (positions[i] < 0) return report_error(fmt::format("--positions: {} is negative", positions[i]));
  }

  KvSequence seq = model.kv_manager().new_sequence(KvSequenceOptions{0, false});
  const auto n = static_cast<int32_t>(ids->size());
  StepPlan plan;
  const int32_t first = model.kv_manager().append(seq, n);
  for (int32_t i = 0; i < n; ++i) plan.add_token((*ids)[i], positions[i], 0, first + i, true);
  plan.block_tables.push_back(seq.blocks());
  plan.seq_n_slots.push_back(seq.n_slots());
  StepOutput output = model.runner().run(plan);
  model.kv_manager().free(seq);

  Tensor token_tensor = Tensor::zeros(DType::kI32, {n});
  Tensor position_tensor = Tensor::zeros(DType::kI32, {n});
  std::copy(ids->begin(), ids->end(), token_tensor.data<int32_t>());
  std::copy(positions.begin(), positions.end(), position_tensor.data<int32_t>());
  Status status = write_safetensors(
      flags.out, {{"logits", output.logits}, {"tokens", token_tensor}, {"positions", position_tensor}});
  if (!status.ok()) return report_error(status.message());
  std::fprintf(stderr, "specstack: wrote logits [%d, %lld] to %s\n", n, static_cast<long long>(vocab),
               flags.out.c_str());
  return 0;
}

}  // namespace

std::function<int()> add_logits_command(CLI::App& app) {
  auto flags = std::make_shared<LogitsFlags>();
  CLI::App* command = app.add_subcommand("logits", "write the logits of every given token (float32 [n, vocab])");
  flags->model.add_to(*command);
  command->add_option("--tokens", flags->tokens, "token ids, e.g. 1,2,3")->required();
  command->add_option("--positions", flags->positions, "RoPE positions (default 0..n-1)");
  command->add_option("-o,--out", flags->out, "output .safetensors file")->required();
  return [flags] { return run_logits(*flags); };
}

}  // namespace specstack::cli
