// kharness run --operator NAME [--budget N] [--provider P] ...: the optimisation loop
// (docs/controller.md); with --model NAME [--phase P] [--objective kernel|layer], every promotion
// also passes model-check in that model's layer (docs/controller.md#in-model-validation).
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "controller/archive_recorder.hpp"
#include "controller/evaluator.hpp"
#include "controller/recorder.hpp"
#include "controller/search.hpp"
#include "core/json_util.hpp"
#include "kharness/archive.hpp"
#include "kharness/model.hpp"
#include "kharness/text.hpp"
#include "llm/providers.hpp"
#include "pipeline/evaluation.hpp"
#include "tune/tune_provider.hpp"

namespace kharness::cli {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};

void on_sigint(int) {
  if (g_stop.load()) {
    ::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
    ::raise(SIGINT);
    return;
  }
  g_stop.store(true);
  static const char msg[] =
      "\nkharness: stopping after the candidate in flight (Ctrl-C again to abort)\n";
  (void)!::write(2, msg, sizeof(msg) - 1);
}

// The search's own settings are bound straight to their flags (RunArgs::search, with
// SearchOptions' defaults); the rest are what the command line gives before it is resolved
// (a provider name, TEXT or @FILE, a seed string) and what only the CLI uses.
struct RunArgs {
  controller::SearchOptions search;
  std::string provider;
  std::string model;  // the provider's model (--llm-model)
  std::string base_url;
  std::string providers_config;
  std::string command;
  double command_timeout = 1800;
  std::string responses;
  std::vector<std::string> hints;  // TEXT or @FILE each
  std::string diagnosis;           // TEXT or @FILE
  bool no_cascade = false;
  bool no_profile = false;
  bool no_archive = false;
  std::string run_dir;
  std::string resume;
  std::string out;
  std::string arch;
  std::string gpus;  // --gpus all|LIST
  std::string seed;
  bool no_cache = false;
  // In-model validation: --model (a model of models/ or a model file), --phase, --model-layers
  // (0: the default, ModelGate's, at most the model's), --objective.
  std::string in_model;
  std::string phase = "decode";
  int model_layers = 0;
  std::string objective = "kernel";
};

// TEXT, or the contents of FILE for @FILE.
std::string text_or_file(const std::string& value, const std::string& option) {
  if (value.size() > 1 && value[0] == '@') {
    std::error_code ec;
    if (!std::filesystem::exists(value.substr(1), ec))
      throw input_error(option, fmt::format("no such file: {}", value.substr(1)));
    return read_file(value.substr(1));
  }
  return value;
}

std::string utc_stamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The run's settings as run.json keeps them (never a key: those come from the environment).
json settings(const RunArgs& a, const std::string& arch, std::uint64_t seed) {
  return {{"schema", "kharness.run/1"},
          {"operator", a.search.evaluation.target.operator_name},
          {"provider", a.provider},
          {"model", a.model},
          {"base_url", a.base_url},
          {"command", a.command},
          {"responses", a.responses},
          {"budget", a.search.budget},
          {"max_tokens", a.search.max_tokens},
          {"max_cost", a.search.max_cost},
          {"max_time", a.search.max_time},
          {"patience", a.search.patience},
          {"min_gain", a.search.min_gain},
          {"samples", a.search.samples},
          {"elites", a.search.elites},
          {"prompt_tokens", a.search.prompt_tokens},
          {"max_output_tokens", a.search.max_output_tokens},
          {"reasoning_effort", a.search.reasoning_effort},
          {"hints", a.hints},
          {"diagnosis", a.diagnosis},
          {"compile_only", a.search.compile_only},
          {"cascade", !a.no_cascade},
          {"arch", arch},
          {"seed", seed},
          {"in_model", a.in_model.empty() ? json(nullptr)
                                          : json{{"model", a.in_model},
                                                 {"phase", a.phase},
                                                 {"layers", a.model_layers},
                                                 {"objective", a.objective}}},
          {"created", utc_stamp()}};
}

// --resume: the in-model validation a run was made with is kept; a command line may repeat it,
// never change it (the records' model verdicts and layer speedups are of that model).
void apply_stored_model(RunArgs& a, const json& s, const CLI::App& app, const std::string& source) {
  const json stored = s.value("in_model", json());
  const bool given = app.count("--model") + app.count("--phase") + app.count("--model-layers") +
                         app.count("--objective") >
                     0;
  if (stored.is_null()) {
    if (given)
      throw input_error("--model", fmt::format("the run was made without in-model validation ({}); "
                                               "a resumed run cannot add it",
                                               source));
    return;
  }
  if (!stored.is_object())
    throw input_error(source + ": in_model",
                      fmt::format("expected an object, got {}", stored.type_name()));
  RunArgs kept;
  try {
    kept.in_model = stored.at("model").get<std::string>();
    kept.phase = stored.at("phase").get<std::string>();
    // Read as a checked whole number: get<int>() of 1e308 would be a cast with undefined behaviour.
    const std::int64_t layers = json_util::as_int(stored.at("layers"), source, "in_model.layers");
    if (layers < 1 || layers > std::numeric_limits<int>::max())
      throw input_error(source + ": in_model.layers",
                        fmt::format("{} is not a layer count", layers));
    kept.model_layers = static_cast<int>(layers);
    kept.objective = stored.at("objective").get<std::string>();
  } catch (const json::exception&) {
    throw input_error(source + ": in_model", "needs model, phase, layers and objective");
  }
  auto agree = [&](const char* flag, const auto& given_value, const auto& kept_value) {
    if (app.count(flag) > 0 && given_value != kept_value)
      throw input_error(flag, fmt::format("the run was made with {} {}; a resumed run keeps its "
                                          "in-model validation",
                                          flag, kept_value));
  };
  // A model named by path is a file read from this machine: like where answers come from, a run
  // folder from elsewhere does not get to name one. The command line must repeat it.
  if (model::names_a_model_file(kept.in_model) && app.count("--model") == 0)
    throw input_error(
        source + ": in_model.model",
        fmt::format("names the model file '{}'; a model file named by a run folder is "
                    "read only when the command line names it too: give --model {}",
                    kept.in_model, kept.in_model));
  agree("--model", a.in_model, kept.in_model);
  agree("--phase", a.phase, kept.phase);
  agree("--model-layers", a.model_layers, kept.model_layers);
  agree("--objective", a.objective, kept.objective);
  a.in_model = kept.in_model;
  a.phase = kept.phase;
  a.model_layers = kept.model_layers;
  a.objective = kept.objective;
}

// --resume: the stored settings, except what this command line gives explicitly.
void apply_stored(RunArgs& a, const json& s, const CLI::App& app, const std::string& source) {
  auto take = [&](const char* flag, const char* key, auto& field) {
    if (app.count(flag) == 0 && s.contains(key)) {
      try {
        field = s[key].get<std::decay_t<decltype(field)>>();
      } catch (const json::exception&) {  // an edited or damaged run.json
        throw input_error(source + ": " + key,
                          fmt::format("has the wrong type ({}) for {}", s[key].type_name(), flag));
      }
    }
  };
  take("--operator", "operator", a.search.evaluation.target.operator_name);
  take("--provider", "provider", a.provider);
  take("--llm-model", "model", a.model);
  // Where answers come from is never read back: a run folder from elsewhere (a CI artifact, a
  // shared run) must not run a shell command with the API keys in its environment, send a key
  // to a URL it names, or replay answers from a folder it names. These come from this command
  // line only; a stored one this command line does not repeat is shown and refused.
  auto from_command_line = [&](const char* flag, const char* key, const std::string& given) {
    auto it = s.find(key);
    if (it == s.end() || it->is_null()) return;
    if (!it->is_string())
      throw input_error(source + ": " + key,
                        fmt::format("has the wrong type ({}) for {}", it->type_name(), flag));
    const std::string stored = it->get<std::string>();
    if (stored.empty() || stored == given) return;
    throw input_error(
        source + ": " + key,
        fmt::format("the run was made with {} \"{}\"{}; a resumed run takes {} from its command "
                    "line only, never from its folder, and the two must agree",
                    flag, printable_line(bounded(stored, 200)),
                    given.empty() ? std::string(", which this command line does not give")
                                  : fmt::format(", this command line gives \"{}\"",
                                                printable_line(bounded(given, 200))),
                    flag));
  };
  from_command_line("--base-url", "base_url", a.base_url);
  from_command_line("--command", "command", a.command);
  from_command_line("--responses", "responses", a.responses);
  take("--budget", "budget", a.search.budget);
  take("--max-tokens", "max_tokens", a.search.max_tokens);
  take("--max-cost", "max_cost", a.search.max_cost);
  take("--max-time", "max_time", a.search.max_time);
  take("--patience", "patience", a.search.patience);
  take("--min-gain", "min_gain", a.search.min_gain);
  take("--samples", "samples", a.search.samples);
  take("--elites", "elites", a.search.elites);
  take("--prompt-tokens", "prompt_tokens", a.search.prompt_tokens);
  take("--max-output-tokens", "max_output_tokens", a.search.max_output_tokens);
  take("--reasoning-effort", "reasoning_effort", a.search.reasoning_effort);
  take("--hint", "hints", a.hints);
  take("--diagnosis", "diagnosis", a.diagnosis);
  take("--compile-only", "compile_only", a.search.compile_only);
  take("--arch", "arch", a.arch);
  bool cascade = !a.no_cascade;
  take("--no-cascade", "cascade", cascade);
  a.no_cascade = !cascade;
  std::uint64_t seed = 0;
  if (app.count("--seed") == 0 && s.contains("seed")) {
    take("--seed", "seed", seed);
    a.seed = std::to_string(seed);
  }
}

class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(2) != 0) {}
  void show(const controller::Progress& p) {
    std::string line = fmt::format(
        "[{}/{}] {} {}{} | best {} {:.3f}x | {} tokens ${:.4f} | {:.0f} s", p.candidates, p.budget,
        p.last_id, p.last_status, p.promoted ? " (promoted)" : "", p.best_id, p.best_score,
        p.tokens, p.cost, p.elapsed);
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      if (p.promoted) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  void end() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  bool tty_;
};

// Numbers no run can use are bad usage before anything starts (also those a --resume reads back).
void validate_args(const RunArgs& args) {
  const controller::SearchOptions& o = args.search;
  if (o.budget < 0) throw input_error("--budget", "must be >= 0");
  if (o.samples < 1) throw input_error("--samples", "must be at least 1");
  validate_gpus_flag(args.gpus);
  if (o.prompt_tokens < 1000) throw input_error("--prompt-tokens", "must be at least 1000");
  if (o.elites < 1) throw input_error("--elites", "must be at least 1");
  if (o.patience < 0) throw input_error("--patience", "must be >= 0 (0: never restart)");
  if (!(o.min_gain >= 0 && o.min_gain < 1))
    throw input_error("--min-gain", "must be a fraction in [0, 1) (0.02: 2%)");
  if (o.max_output_tokens < 1) throw input_error("--max-output-tokens", "must be at least 1");
  if (o.max_tokens < 0) throw input_error("--max-tokens", "must be >= 0 (0: no limit)");
  // !(x >= 0) also refuses NaN.
  if (!(o.max_cost >= 0)) throw input_error("--max-cost", "must be >= 0 (0: no limit)");
  if (!(o.max_time >= 0)) throw input_error("--max-time", "must be >= 0 (0: no limit)");
  if (!(o.evaluation.timeouts.seconds > 0)) throw input_error("--timeout", "must be > 0 seconds");
  validate_launch_timeout(o.evaluation.timeouts.launch_seconds);
  if (!(args.command_timeout > 0)) throw input_error("--command-timeout", "must be > 0 seconds");
  if (!(o.request_timeout > 0)) throw input_error("--request-timeout", "must be > 0 seconds");
  if (!controller::parse_objective(args.objective))
    throw input_error("--objective",
                      fmt::format("expected kernel or layer, got '{}'", args.objective));
  if (args.in_model.empty()) {
    if (args.objective == "layer")
      throw input_error("--objective", "layer needs --model (the model whose layer is timed)");
    if (args.model_layers != 0) throw input_error("--model-layers", "needs --model");
    if (args.phase != "decode") throw input_error("--phase", "needs --model");
  } else if (o.compile_only) {
    throw input_error("--model", "model-check runs on a GPU: not with --compile-only");
  }
  if (args.model_layers < 0) throw input_error("--model-layers", "must be at least 1");
}

// --model: the model a run validates its candidates in, checked before anything runs: the model
// file loads, the phase is one of its phases, the operator is a node of its layer, the layer
// count fits it. Disabled without --model.
controller::ModelGate resolve_in_model(const RunArgs& args, const GlobalOptions& global) {
  controller::ModelGate gate;
  if (args.in_model.empty()) return gate;
  try {
    gate.file = model::find_model(args.in_model);
  } catch (const Error& e) {
    // `--model` named the provider's model before `--llm-model` did.
    if (e.code() != ExitCode::kUsage) throw;
    throw Error(e.code(), e.where(),
                std::string(e.what()) +
                    "; --model names the model a candidate is validated in, the provider's "
                    "model is --llm-model");
  }
  const model::Model m = model::load_model(gate.file, make_registry(global));
  controller::model_nodes_of(m, args.phase, args.search.evaluation.target.operator_name);
  gate.name = m.name;
  gate.phase = args.phase;
  if (args.model_layers > m.layers)
    throw input_error("--model-layers", fmt::format("expected 1 to {} ({}'s layers), got {}",
                                                    m.layers, m.name, args.model_layers));
  gate.layers = args.model_layers > 0 ? args.model_layers : std::min(gate.layers, m.layers);
  gate.objective = *controller::parse_objective(args.objective);
  return gate;
}

// The candidates' provider, and the options it was made with (the search reads its model and
// prices from them). earlier: the candidates a resumed run already has, the seed among them.
struct ProviderChoice {
  llm::ProviderOptions options;
  std::unique_ptr<llm::Provider> provider;
};

ProviderChoice choose_provider(const RunArgs& args, const GlobalOptions& global,
                               std::size_t earlier, const std::string& arch, std::uint64_t seed,
                               const std::filesystem::path& run_dir) {
  ProviderChoice chosen;
  llm::ProviderOptions& po = chosen.options;
  po.base_url = args.base_url;
  po.model = args.model;
  po.command = args.command;
  po.command_timeout_seconds = args.command_timeout;
  po.responses_dir = args.responses;
  po.answers_used = earlier == 0 ? 0 : earlier - 1;  // all but the seed
  po.config = llm::load_config(args.providers_config);
  po.cancel = &g_stop;
  po.context = {{"operator", args.search.evaluation.target.operator_name},
                {"arch", arch},
                {"compile_only", args.search.compile_only},
                {"seed", seed},
                {"run_dir", run_dir.string()}};
  std::vector<std::string> dirs;
  for (const auto& d : global.operators_dirs) dirs.push_back(d.string());
  po.context["operators_dirs"] = dirs;
  // The model providers are llm's; the offline generator is tune's.
  if (args.provider == "tune") {
    chosen.provider = std::make_unique<tune::TuneProvider>();
  } else {
    std::vector<std::string> known = llm::provider_names();
    if (std::find(known.begin(), known.end(), args.provider) == known.end()) {
      known.emplace_back("tune");
      throw input_error("--provider", fmt::format("unknown provider '{}' (known: {})",
                                                  args.provider, join(known, ", ")));
    }
    chosen.provider = llm::make_provider(args.provider, po);
  }
  return chosen;
}

ExitCode run_run(RunArgs args, const GlobalOptions& global, const CLI::App& app) {
  namespace fs = std::filesystem;
  require_compile_sandbox("run");
  fs::path run_dir;
  std::vector<controller::CandidateRecord> earlier;
  std::unique_ptr<controller::FileRecorder> files;
  if (!args.resume.empty()) {
    run_dir = args.resume;
    files = std::make_unique<controller::FileRecorder>(run_dir);
    const json stored = files->load_run();
    apply_stored(args, stored, app, (run_dir / "run.json").string());
    apply_stored_model(args, stored, app, (run_dir / "run.json").string());
    earlier = files->load_candidates();
  } else {
    if (args.search.evaluation.target.operator_name.empty())
      throw input_error("--operator", "required (or --resume RUN)");
    run_dir =
        args.run_dir.empty()
            ? fs::path("runs") /
                  fmt::format("{}-{}", args.search.evaluation.target.operator_name, utc_stamp())
            : fs::path(args.run_dir);
    std::error_code ec;
    if (fs::exists(run_dir / "run.json", ec))
      throw input_error(run_dir.string(),
                        "already holds a run: --resume it, or give another --run-dir");
    files = std::make_unique<controller::FileRecorder>(run_dir);
  }
  validate_args(args);
  const controller::ModelGate in_model = resolve_in_model(args, global);
  if (args.resume.empty()) make_output_dir("--run-dir", run_dir);
  if (!args.out.empty()) check_output_file("--out", args.out);
  // Every candidate also goes to the archive (a run of its own there); an archive that cannot be
  // opened costs the archive record only, not the run: a warning.
  std::optional<archive::Archive> store;
  std::unique_ptr<controller::ArchiveRecorder> archived;
  controller::RunRecorder* recorder_ptr = files.get();
  if (!args.no_archive) {
    fs::path dir =
        global.archive_dir.empty() ? archive::Archive::default_dir() : global.archive_dir;
    try {
      store.emplace(dir);
      archived = std::make_unique<controller::ArchiveRecorder>(
          *files, *store, args.search.evaluation.target.operator_name);
      if (!earlier.empty()) archived->load_run();  // re-links the archive run of the run folder
      recorder_ptr = archived.get();
    } catch (const Error& e) {
      spdlog::warn("not archiving (the run folder keeps every record): {}", e.message());
      archived.reset();
      store.reset();
    }
  }
  // The pool: a step's --samples candidates evaluate on its workers at once
  // (docs/controller.md#search).
  args.search.gpus = resolve_gpus(args.gpus, !args.search.compile_only, !args.arch.empty());
  std::string arch = args.arch.empty() && args.search.gpus[0] && !args.search.gpus[0]->arch.empty()
                         ? normalize_arch(args.search.gpus[0]->arch)
                         : resolve_arch(args.arch);
  const std::uint64_t seed = parse_seed_flag("--seed", args.seed);
  if (args.provider.empty()) args.provider = llm::default_provider_name();
  std::vector<std::string> hints;
  for (const auto& h : args.hints) hints.push_back(text_or_file(h, "--hint"));
  std::string diagnosis = args.diagnosis.empty() ? "" : text_or_file(args.diagnosis, "--diagnosis");

  ProviderChoice chosen = choose_provider(args, global, earlier.size(), arch, seed, run_dir);
  const llm::ProviderOptions& po = chosen.options;
  std::unique_ptr<llm::Provider> provider = std::move(chosen.provider);

  // The flags bound to args.search are in place; the rest is resolved here.
  controller::SearchOptions so = args.search;
  so.evaluation.target.operators_dirs = global.operators_dirs;
  so.evaluation.target.arch = arch;
  // A worker may wait for the other workers' timings on its GPU (gpu_sharing).
  so.evaluation.timeouts.seconds *= gpu_sharing(so.gpus);
  so.provider = args.provider;
  so.model = llm::resolve_model(args.provider, po);
  so.prices = po.config;
  so.hints = hints;
  so.diagnosis = diagnosis;
  so.cascade = !args.no_cascade;
  so.profile = !args.no_profile;
  so.seed = seed;
  so.evaluation.target.use_cache = !args.no_cache;
  so.evaluation.bench.baseline = true;
  so.skills_dir = data_dir() / "skills";
  so.work_dir = run_dir;
  so.out = args.out;
  so.in_model = in_model;
  so.in_model.timeout *= gpu_sharing(so.gpus);

  if (earlier.empty()) recorder_ptr->begin(settings(args, arch, seed));
  // One pipeline for the run's evaluations: each candidate loaded and compiled once, its verdict
  // looked up in the archive's verdict cache (a second run of the same candidates reuses them);
  // the recorder archives, with the cache key.
  so.evaluation.archive.dir = global.archive_dir;
  const controller::StageSettings stage = controller::stage_settings(so);
  pipeline::Evaluator pipeline(stage.request);
  controller::StageEvaluator evaluator(stage, pipeline);
  controller::Search search(so, evaluator, *provider, *recorder_ptr, &g_stop);
  if (!earlier.empty()) search.resume(earlier);

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  struct sigaction previous {};
  ::sigaction(SIGINT, &sa, &previous);
  ProgressLine line;
  if (!global.quiet)
    std::fprintf(stderr, "kharness run: %s on %s with %s%s; records in %s\n",
                 so.evaluation.target.operator_name.c_str(), arch.c_str(), args.provider.c_str(),
                 so.model.empty() ? "" : (" (" + so.model + ")").c_str(), run_dir.c_str());
  controller::SearchResult result;
  try {
    result = search.run([&](const controller::Progress& p) {
      if (!global.quiet) line.show(p);
    });
  } catch (...) {
    ::sigaction(SIGINT, &previous, nullptr);
    throw;
  }
  ::sigaction(SIGINT, &previous, nullptr);
  line.end();
  std::fputs(result.summary_text.c_str(), stdout);
  std::fprintf(stdout, "Records: %s%s\n", run_dir.c_str(),
               args.out.empty() ? "" : ("; best kernel: " + args.out).c_str());
  if (archived)
    std::fprintf(stdout, "Archive: %s (run %s; `kharness show ID` for a candidate)\n",
                 store->dir().c_str(), archived->run_id().c_str());
  if (result.stop_reason == "interrupted")
    std::fprintf(stdout, "Interrupted: carry on with `kharness run --resume %s`\n",
                 run_dir.c_str());
  std::fflush(stdout);
  if (result.fatal) throw *result.fatal;
  return ExitCode::kPassed;
}

}  // namespace

Runner setup_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  const controller::SearchOptions& d = args->search;  // the defaults the help states
  app.add_option("--operator", args->search.evaluation.target.operator_name, "Operator to optimise")
      ->type_name("NAME");
  app.add_option("--provider", args->provider,
                 "anthropic, openai, command, replay or tune (default: anthropic/openai when "
                 "their API key is set, else tune)")
      ->type_name("NAME");
  app.add_option("--llm-model", args->model,
                 "The provider's model (default: configs/providers.json's)");
  app.add_option("--base-url", args->base_url, "API base URL (a proxy or a local server)")
      ->type_name("URL");
  app.add_option("--providers-config", args->providers_config,
                 "Models, base URLs and prices (default: configs/providers.json)")
      ->type_name("FILE");
  app.add_option("--command", args->command,
                 "command provider: a shell command line; the prompt goes to its stdin, the "
                 "answer comes from its stdout (e.g. \"claude -p --output-format json\")");
  app.add_option("--command-timeout", args->command_timeout,
                 "command provider: seconds per answer (default 1800)");
  app.add_option("--responses", args->responses, "replay provider: folder of recorded answers")
      ->type_name("DIR");
  app.add_option("--budget", args->search.budget,
                 fmt::format("Candidates to evaluate (default {})", d.budget));
  app.add_option("--max-tokens", args->search.max_tokens, "Stop after this many tokens (in + out)");
  app.add_option("--max-cost", args->search.max_cost, "Stop after this many US dollars");
  app.add_option("--max-time", args->search.max_time, "Stop after this many seconds");
  app.add_option(
      "--patience", args->search.patience,
      fmt::format("Steps without promotion before a dropout restart (default {}; 0: never)",
                  d.patience));
  app.add_option("--min-gain", args->search.min_gain,
                 fmt::format("Least gain over the best kernel for a promotion, beside the measured "
                             "noise (default {:g}: {:g}%)",
                             d.min_gain, 100 * d.min_gain));
  app.add_option("--samples", args->search.samples,
                 "Candidates asked for per step, in parallel; they evaluate on the --gpus workers "
                 "at once");
  add_gpus_option(app, &args->gpus);
  app.add_option("--elites", args->search.elites,
                 fmt::format("Elite kernels kept (default {})", d.elites));
  app.add_option(
      "--prompt-tokens", args->search.prompt_tokens,
      fmt::format("Bound of a prompt in estimated tokens (default {})", d.prompt_tokens));
  app.add_option("--max-output-tokens", args->search.max_output_tokens,
                 fmt::format("Output limit of one answer (default {})", d.max_output_tokens));
  app.add_option("--reasoning-effort", args->search.reasoning_effort,
                 "low, medium or high (openai)")
      ->check(CLI::IsMember({"low", "medium", "high"}));
  app.add_option(
      "--request-timeout", args->search.request_timeout,
      fmt::format("Seconds per model request, retries included (default {:g})", d.request_timeout));
  app.add_option("--hint", args->hints,
                 "A person's optimisation direction for every prompt: TEXT or @FILE (repeatable)");
  app.add_option("--diagnosis", args->diagnosis,
                 "A profile diagnosis of the seed for the prompts: TEXT or @FILE");
  app.add_flag("--compile-only", args->search.compile_only,
               "Compile verdicts only (no GPU needed; nothing is timed or promoted)");
  app.add_flag("--no-cascade", args->no_cascade,
               "Validate every candidate on all workloads (no representative shapes first)");
  app.add_flag(
      "--no-profile", args->no_profile,
      "Do not profile the best kernel for the prompts' diagnosis (it needs counter access)");
  app.add_flag("--no-archive", args->no_archive,
               "Keep the records in the run folder only, not in the archive (--archive DIR)");
  app.add_option("--run-dir", args->run_dir, "Where the run's records go (default runs/OP-TIME)")
      ->type_name("DIR");
  app.add_option("--resume", args->resume, "Carry on with an earlier run (its folder)")
      ->type_name("RUN");
  app.add_option("--out", args->out, "Write the best kernel here at the end")->type_name("FILE");
  app.add_option("--arch", args->arch, "Target (default: this GPU)")->type_name("ARCH");
  app.add_option("--seed", args->seed, "Base seed for checks and the search (default: random)");
  app.add_option("--timeout", args->search.evaluation.timeouts.seconds,
                 fmt::format("Wall-clock limit per evaluation (default {:g} s)",
                             d.evaluation.timeouts.seconds));
  add_launch_timeout_option(app, &args->search.evaluation.timeouts.launch_seconds);
  app.add_flag("--no-cache", args->no_cache, "Bypass the compile cache and the verdict cache");
  app.add_option("--model", args->in_model,
                 "Validate candidates in this model's layer (models/NAME or a model file): a "
                 "promotion also needs model-check to pass with the candidate substituted for "
                 "the operator's nodes")
      ->type_name("NAME|FILE");
  app.add_option("--phase", args->phase, "The model's phase with --model (default decode)")
      ->type_name("PHASE");
  app.add_option("--model-layers", args->model_layers,
                 fmt::format("Layers per model-check with --model (default {}, at most the "
                             "model's)",
                             controller::ModelGate{}.layers))
      ->type_name("N");
  app.add_option("--objective", args->objective,
                 "What promotion and the best kernel are ranked by: kernel (its own speedup, the "
                 "default) or layer (the layer speedup, with --model)")
      ->type_name("kernel|layer");
  CLI::App* self = &app;
  return [args, self](const GlobalOptions& global) { return run_run(*args, global, *self); };
}

}  // namespace kharness::cli
