// specstack: LLM inference engine. Subcommands: generate, logits, bench,
// serve, eval.
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"specstack: LLM inference with speculative prefill"};
  app.require_subcommand(1);
  std::function<int()> run_generate = specstack::cli::add_generate_command(app);
  std::function<int()> run_logits = specstack::cli::add_logits_command(app);
  std::function<int()> run_bench = specstack::cli::add_bench_command(app);
  std::function<int()> run_serve = specstack::cli::add_serve_command(app);
  std::function<int()> run_eval = specstack::cli::add_eval_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  try {
    if (app.got_subcommand("generate")) return run_generate();
    if (app.got_subcommand("logits")) return run_logits();
    if (app.got_subcommand("bench")) return run_bench();
    if (app.got_subcommand("serve")) return run_serve();
    if (app.got_subcommand("eval")) return run_eval();
  } catch (const std::exception& error) {
    return specstack::cli::report_error(error.what());
  }
  return 1;
}
