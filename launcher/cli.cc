#include "launcher/cli.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "core/settings.h"
#include "launcher/cli_checks.h"
#include "launcher/horovod_compat.h"
#include "ops/algorithm_table.h"
#include "tutti/config.h"

namespace tutti {
namespace launcher {
namespace {

struct SettingFlag {
  const char* flag;
  const char* setting;
  double scale;  // flag value × scale = setting value (1: passed through as text)
  const char* unit;
  const char* help;  // without the default: flagHelp() adds the registry's
};

constexpr double kMiB = 1024.0 * 1024.0;

const SettingFlag kSettingFlags[] = {
    {"--fusion-threshold-mb", "TUTTI_FUSION_THRESHOLD_BYTES", kMiB, "MB",
     "fusion buffer size in MiB; 0 disables fusion"},
    {"--cycle-time-ms", "TUTTI_CYCLE_TIME_MS", 1, "MS",
     "milliseconds to wait before each negotiation round; 0: start at once"},
    {"--cache-capacity", "TUTTI_CACHE_CAPACITY", 1, "N",
     "entries in the response cache; 0 disables it"},
    {"--timeout-seconds", "TUTTI_TIMEOUT_SECONDS", 1, "S",
     "seconds to wait for peers at start, and for a silent connection (dead host, cut link) "
     "before the peer is declared lost; a hung process whose host answers is a stall instead "
     "(--mpi: also the bound of each MPI wait and of MPI_Finalize)"},
    {"--stall-check-warning-time-seconds", "TUTTI_STALL_CHECK_TIME_SECONDS", 1, "S",
     "seconds before a tensor missing on some ranks is reported as stalled; 0: never"},
    {"--stall-check-shutdown-time-seconds", "TUTTI_STALL_SHUTDOWN_TIME_SECONDS", 1, "S",
     "seconds after which stalled ops fail on every rank; 0: never, they only warn"},
    {"--backend", "TUTTI_BACKEND", 1, "NAME",
     "collective backend: tcp, mpi, nccl (CUDA tensors), or auto = mpi under mpirun, else tcp"},
    {"--compression", "TUTTI_COMPRESSION", 1, "SPEC",
     "default compression of float allreduce where the op does not choose one (C API: empty "
     "spec; Python: compression=None, DistributedOptimizer): none, fp16, bf16, "
     "fp16:cross_host, bf16:cross_host (cast only what crosses hosts), "
     "topk:<ratio>[:warmup=<steps>], int8[:<block>]"},
    {"--compression-zstd-level", "TUTTI_COMPRESSION_ZSTD_LEVEL", 1, "N",
     "zstd level 1..19 for data sent over TCP connections (not shared memory), frames sent raw "
     "where zstd saves < 10 %; every rank must use the same level; 0: off"},
    {"--timeline-filename", "TUTTI_TIMELINE", 1, "FILE",
     "record a Chrome-trace timeline: each rank writes FILE with .rank<R> inserted before the "
     "extension (docs/timeline.md)"},
    {"--autotune-log-file", "TUTTI_AUTOTUNE_LOG", 1, "FILE",
     "with --autotune: rank 0 writes a CSV row per scored sample (Horovod's columns) to FILE"},
    {"--autotune-warmup-samples", "TUTTI_AUTOTUNE_WARMUP_SAMPLES", 1, "N",
     "with --autotune: samples discarded before scoring starts"},
    {"--autotune-steps-per-sample", "TUTTI_AUTOTUNE_STEPS_PER_SAMPLE", 1, "N",
     "with --autotune: steps per sub-sample (a sample is 5 sub-samples)"},
    {"--autotune-bayes-opt-max-samples", "TUTTI_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1, "N",
     "with --autotune: samples of the Bayesian-optimisation stage"},
    {"--autotune-gaussian-process-noise", "TUTTI_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 1, "X",
     "with --autotune: noise of the Gaussian process (normalised score units)"},
    {"--log-level", "TUTTI_LOG_LEVEL", 1, "LEVEL",
     "trace, debug, info, warning or error, for the ranks and tuttirun"},
};

// The flag's help with its setting's default (core/settings.h, the one place
// it is written), in the flag's unit.
std::string flagHelp(const SettingFlag& f) {
  const SettingSpec* spec = findSettingSpec(f.setting);
  if (spec == nullptr || spec->default_value.empty()) return f.help;
  std::string value = spec->default_value;
  if (f.scale != 1) value = formatNumber(std::stod(value) / f.scale);
  return std::string(f.help) + " (default " + value + ")";
}

const SettingFlag* findFlag(const std::string& flag) {
  for (const auto& f : kSettingFlags) {
    if (flag == f.flag) return &f;
  }
  return nullptr;
}

const char* kFooter = R"(
The command runs once per rank with TUTTI_RANK, TUTTI_SIZE, TUTTI_LOCAL_RANK,
TUTTI_LOCAL_SIZE, TUTTI_CROSS_RANK, TUTTI_CROSS_SIZE, the rendezvous address
and a per-job secret in its environment. Ranks fill the hosts in order. Unless
set, OMP_NUM_THREADS = max(1, cores / ranks on the host). Remote ranks start
through ssh in the same working directory, with tuttirun's environment.

Elastic mode (--min-np, --max-np or --host-discovery-script; docs/elastic.md):
each process is a worker with TUTTI_ELASTIC_WORKER_ID (no TUTTI_RANK, ...: it
reads its rank from the generation it joins), output is prefixed with the
worker id, a failed worker's host is blacklisted and the survivors go on in a
new generation; hosts the script adds get workers.

Examples:
  tuttirun -np 4 python3 train.py
  tuttirun -np 8 -H a:4,b:4 ./trainer --epochs 3
  tuttirun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python3 train.py
  tuttirun -np 4 -H ns1:2,ns2:2 --rsh-agent 'ip netns exec {host}' ./trainer
  tuttirun --hostfile hosts.txt -x LD_LIBRARY_PATH -x NCCL_DEBUG=INFO ./trainer
  (hosts.txt: one 'host slots=N' per line, '#' starts a comment)

Exit codes:
  0        every rank exited with code 0
  1        a rank exited with a non-zero code or was killed by a signal
  2        bad command line or flag value
  3        the job could not start (spawn, ssh or rendezvous server failed)
  4        ranks did not reach the rendezvous within --start-timeout
  128+N    tuttirun received signal N (130: SIGINT, 143: SIGTERM)
)";

// CLI11's usage line does not know that a command follows the options.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: tuttirun [options] [-np N] [-H HOST:SLOTS,...] [--] command [args...]\n";
  }
};

// A whole word that strtod reads as a number ("5", "0.5", "1e3").
bool isNumber(const std::string& word) {
  char* end = nullptr;
  std::strtod(word.c_str(), &end);
  return !word.empty() && end != word.c_str() && *end == '\0';
}

}  // namespace

std::string formatNumber(double v) {
  std::ostringstream out;
  out.precision(12);
  out << v;
  return out.str();
}

std::vector<std::string> settingFlags() {
  std::vector<std::string> out;
  for (const auto& f : kSettingFlags) out.push_back(f.flag);
  return out;
}

Status settingFromFlag(const std::string& flag, const std::string& value,
                       std::pair<std::string, std::string>* setting) {
  const SettingFlag* f = findFlag(flag);
  if (f == nullptr) return Status::invalidArgument(flag + ": not a settings flag");
  const SettingSpec* spec = findSettingSpec(f->setting);
  if (spec == nullptr) return Status::internal(std::string(f->setting) + " is not in the registry");
  std::string converted = value;
  Status st;
  if (f->scale != 1) {
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    bool number = !value.empty() && *end == '\0' && std::isfinite(v);
    if (number) {
      converted = std::to_string(std::llround(v * f->scale));
      st = validateSetting(*spec, converted);
    }
    if (!number || !st.isOk()) {
      return Status::invalidArgument(
          flag + " " + value + ": expected a number in [" + formatNumber(spec->min / f->scale) +
          ", " + formatNumber(spec->max / f->scale) + "] (" + flagHelp(*f) + ")");
    }
  } else {
    st = validateSetting(*spec, value);
    if (!st.isOk()) {
      // "TUTTI_X=v: expected ..." → "--flag v: expected ..."
      std::string msg = st.message();
      size_t at = msg.find(": expected");
      std::string rest = at == std::string::npos ? ": " + msg : msg.substr(at);
      return Status::invalidArgument(flag + " " + value + rest);
    }
  }
  *setting = {f->setting, converted};
  return Status::ok();
}

std::string versionText() {
  return std::string("tuttirun (tutti) ") + TUTTI_VERSION_STRING + "\n";
}

std::string checkBuildText() {
  auto line = [](bool built, const char* name, const std::string& note) {
    return std::string("  [") + (built ? "X" : " ") + "] " + name + note + "\n";
  };
  auto found = [](int f) {
    return std::string(f ? " (found at configure time)" : " (not found at configure time)");
  };
  std::string out = versionText();
  out += "Available backends:\n";
  out += line(true, "tcp", "");
  out += TUTTI_BUILT_MPI ? line(true, "mpi", " (Open MPI; tuttirun --mpi)")
                         : line(false, "mpi", ": not built" + found(TUTTI_FOUND_MPI));
  out += TUTTI_BUILT_NCCL
             ? line(true, "nccl", " (CUDA tensors; TUTTI_BACKEND=nccl or tuttirun --backend nccl)")
             : line(false, "nccl", ": not built" + found(TUTTI_FOUND_NCCL));
  out += "Available features:\n";
  out += TUTTI_BUILT_CUDA
             ? line(true, "cuda", " (CUDA tensors; staged through host memory unless nccl)")
             : line(false, "cuda", ": not built" + found(TUTTI_FOUND_CUDA));
  out += line(true, "ssh launch", "");
  out += line(true, "rendezvous server", "");
  out +=
      "Algorithms of the tcp backend (COLLECTIVE:default byte range:NAME [transports]; the\n"
      "first that fits is taken; TUTTI_ALGORITHMS puts other choices first):\n";
  out += algorithmTableText();
  return out;
}

namespace {

// What CLI11 fills in while parsing: the options, and the flags that are not
// options themselves (they become settings or answers).
struct ParsedFlags {
  LaunchOptions o;
  bool version = false;
  bool check_build = false;
  std::vector<double> cooldown;                       // --blacklist-cooldown-range MIN MAX
  std::map<std::string, std::string> setting_values;  // settings flag -> its value
  bool timeline_mark_cycles = false;
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  bool autotune = false;
};

void addJobOptions(CLI::App& app, ParsedFlags& f) {
  const std::string job = "Job";
  app.add_option("-n,--np", f.o.np, "number of ranks (-np works too; default: slots of the hosts)")
      ->type_name("N")
      ->group(job);
  app.add_option("-x", f.o.env_flags,
                 "pass VAR from tuttirun's environment, or set VAR=value, on every rank "
                 "(repeatable)")
      ->type_name("VAR[=value]")
      ->group(job);
  app.add_option("--start-timeout", f.o.start_timeout_seconds,
                 "seconds for every rank to reach the rendezvous; 0: no limit (default 60)")
      ->type_name("S")
      ->group(job);
  app.add_flag("--mpi", f.o.mpi, "run the job through Open MPI's mpirun (needs the MPI backend)")
      ->group(job);
  app.add_flag("--horovod-compat", f.o.horovod_compat,
               "run an unchanged `import horovod.torch` Python script on tutti (each rank runs "
               "python3 -m tutti.horovod_compat script.py)")
      ->group(job);
}

void addHostOptions(CLI::App& app, ParsedFlags& f) {
  const std::string hosts = "Hosts and ssh";
  app.add_option("-H,--hosts", f.o.hosts,
                 "hosts and their slots, e.g. a:4,b:4 (default: $OMPI_MCA_orte_default_hostfile, "
                 "else a Slurm allocation's nodes and tasks, else localhost:N)")
      ->type_name("HOST:SLOTS,...")
      ->group(hosts);
  app.add_option("--hostfile", f.o.hostfile, "file with one 'host slots=N' per line")
      ->type_name("FILE")
      ->group(hosts);
  app.add_option("-p,--ssh-port", f.o.ssh_port, "ssh port of the remote hosts")
      ->type_name("PORT")
      ->group(hosts);
  app.add_option("-i,--ssh-identity-file", f.o.ssh_identity, "ssh private key for the remote hosts")
      ->type_name("FILE")
      ->group(hosts);
  app.add_option("--network-interface", f.o.network_interface,
                 "interface whose IPv4 address remote ranks use to reach this machine "
                 "(default: the first non-loopback one)")
      ->type_name("NAME")
      ->group(hosts);
  app.add_option("--rsh-agent", f.o.rsh_agent,
                 "start remote ranks with CMD instead of ssh ({host} replaced by the host, else "
                 "the host appended), e.g. 'ip netns exec {host}', 'kubectl exec -i {host} --'")
      ->type_name("'CMD {host}'")
      ->group(hosts);
}

void addElasticOptions(CLI::App& app, ParsedFlags& f) {
  const std::string elastic = "Elastic (docs/elastic.md)";
  app.add_option("--min-np", f.o.min_np,
                 "fewest workers the job runs with; below it waits up to --elastic-timeout "
                 "(default: -np)")
      ->type_name("N")
      ->group(elastic);
  app.add_option("--max-np", f.o.max_np, "most workers the job runs (default: no limit)")
      ->type_name("N")
      ->group(elastic);
  app.add_option("--host-discovery-script", f.o.discovery_script,
                 "program printing the available hosts, one 'host' or 'host:slots' per line; "
                 "run every second (instead of -H / --hostfile)")
      ->type_name("PATH")
      ->group(elastic);
  app.add_option("--slots-per-host", f.o.slots_per_host,
                 "slots of a host the discovery script prints without ':slots' (default 1)")
      ->type_name("N")
      ->group(elastic);
  app.add_option("--elastic-timeout", f.o.elastic_timeout_seconds,
                 "seconds the job waits for --min-np workers before it fails (default 600)")
      ->type_name("S")
      ->group(elastic);
  app.add_option("--reset-limit", f.o.reset_limit,
                 "most new generations (resets) after the first; more fail the job (default: "
                 "no limit)")
      ->type_name("N")
      ->group(elastic);
  app.add_option("--blacklist-cooldown-range", f.cooldown,
                 "a failed host comes back after min(MAX, MIN*2^(k-1)) seconds at its k-th "
                 "failure (default: blacklisted for the rest of the job)")
      ->type_name("MIN MAX")
      ->expected(2)
      ->group(elastic);
}

// Output, runtime settings (one option per settings flag) and information.
void addOutputAndInfoOptions(CLI::App& app, ParsedFlags& f) {
  const std::string output = "Output";
  app.add_option("--output-filename", f.o.output_dir,
                 "also write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr "
                 "(elastic jobs: DIR/worker.<id>/)")
      ->type_name("DIR")
      ->group(output);
  app.add_flag("--verbose", f.o.verbose, "say what tuttirun does (placement, commands, progress)")
      ->group(output);
  const std::string runtime = "Runtime settings (written as TUTTI_* variables)";
  for (const auto& flag : kSettingFlags) {
    app.add_option(flag.flag, f.setting_values[flag.flag],
                   flagHelp(flag) + " [" + flag.setting + "]")
        ->type_name(flag.unit)
        ->group(runtime);
  }
  app.add_flag("--timeline-mark-cycles", f.timeline_mark_cycles,
               "mark every background-loop round in the timeline [TUTTI_TIMELINE_MARK_CYCLES]")
      ->group(runtime);
  app.add_flag("--hierarchical-allreduce", f.hierarchical_allreduce,
               "allreduce within each host, then across hosts, for every size where the "
               "placement allows it (as horovodrun's flag) [TUTTI_HIERARCHICAL_ALLREDUCE=1]")
      ->group(runtime);
  app.add_flag("--hierarchical-allgather", f.hierarchical_allgather,
               "allgather across hosts, then within each host, for every size where the "
               "placement allows it (as horovodrun's flag) [TUTTI_HIERARCHICAL_ALLGATHER=1]")
      ->group(runtime);
  app.add_flag("--autotune", f.autotune,
               "tune the fusion threshold, cycle time and response cache during the first steps; "
               "rank 0 logs the best values at info (docs/autotune.md) [TUTTI_AUTOTUNE]")
      ->group(runtime);
  const std::string info = "Information";
  app.set_help_flag("-h,--help", "print this help and exit")->group(info);
  app.add_flag("--version", f.version, "print the version and exit")->group(info);
  app.add_flag("--check-build", f.check_build, "print the backends and features of this build")
      ->group(info);
}

// Takes the numbers an option of several values needs (--blacklist-cooldown-range
// MIN MAX) after args[*i]: only numbers, so that a missing one neither
// swallows the command nor the next option. "" when all were there.
std::string takeNumbers(const CLI::Option& opt, const std::vector<std::string>& args, size_t* i,
                        std::vector<std::string>* ours) {
  const std::string t = ours->back();
  const std::string name = t.substr(0, t.find('='));
  const int needed = opt.get_items_expected_min();
  int taken = 0;
  while (t.find('=') == std::string::npos && taken < needed && *i + 1 < args.size() &&
         isNumber(args[*i + 1])) {
    ours->push_back(args[++*i]);
    ++taken;
  }
  if (taken >= needed) return "";
  std::string got;
  if (t.find('=') != std::string::npos) got = " " + t.substr(t.find('=') + 1);
  for (int k = taken; k > 0; --k) got += " " + args[*i + 1 - static_cast<size_t>(k)];
  return name + " takes " + (needed == 2 ? "two" : std::to_string(needed)) + " numbers, " +
         opt.get_type_name() + "; got " + (got.empty() ? "none" : got.substr(1));
}

// Splits the options from the command: the command starts at the first word
// that is not an option or an option's value (or after "--"). CLI11 only
// sees `ours`, so the command's own flags are never taken for ours. Returns
// "" or what was wrong (the first problem).
std::string splitOptions(const CLI::App& app, const std::vector<std::string>& args,
                         std::vector<std::string>* ours, std::vector<std::string>* command) {
  std::string error;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string t = args[i];
    if (t == "--") {
      ++i;
      break;
    }
    if (t.size() < 2 || t[0] != '-') break;
    if (t == "-np" || t.compare(0, 4, "-np=") == 0) t = "-" + t;
    ours->push_back(t);
    const CLI::Option* opt = app.get_option_no_throw(t.substr(0, t.find('=')));
    if (opt == nullptr || opt->get_items_expected_max() <= 0) continue;
    if (opt->get_items_expected_min() <= 1) {
      if (t.find('=') == std::string::npos && i + 1 < args.size()) ours->push_back(args[++i]);
      continue;
    }
    std::string missing = takeNumbers(*opt, args, &i, ours);
    if (error.empty()) error = missing;
  }
  command->assign(args.begin() + static_cast<long>(i), args.end());
  return error;
}

// The settings flags given, validated, into o.settings in flag order.
std::string collectSettings(const CLI::App& app, ParsedFlags& f) {
  for (const auto& flag : kSettingFlags) {
    if (app.count(flag.flag) == 0) continue;
    std::pair<std::string, std::string> setting;
    Status st = settingFromFlag(flag.flag, f.setting_values[flag.flag], &setting);
    if (!st.isOk()) return st.message();
    f.o.settings.push_back(setting);
  }
  if (f.timeline_mark_cycles) f.o.settings.emplace_back("TUTTI_TIMELINE_MARK_CYCLES", "1");
  if (f.hierarchical_allreduce) f.o.settings.emplace_back("TUTTI_HIERARCHICAL_ALLREDUCE", "1");
  if (f.hierarchical_allgather) f.o.settings.emplace_back("TUTTI_HIERARCHICAL_ALLGATHER", "1");
  if (f.autotune) f.o.settings.emplace_back("TUTTI_AUTOTUNE", "1");
  return "";
}

// Every check after parsing, in order; the first problem, or "". Fills the
// options derived from flags (settings, cooldown, rsh-agent words).
std::string checkParsed(const CLI::App& app, ParsedFlags& f, const EnvMap& env) {
  std::string err = collectSettings(app, f);
  if (err.empty()) err = checkMpiOptions(f.o, env);
  if (err.empty()) err = checkJobOptions(app, f.o, env);
  if (!err.empty()) return err;
  if (!f.cooldown.empty()) {
    f.o.cooldown_min_seconds = f.cooldown[0];
    f.o.cooldown_max_seconds = f.cooldown[1];
  }
  err = checkElasticOptions(app, f.o);
  if (err.empty()) err = checkRshAgent(app, &f.o);
  if (err.empty() && f.o.command.empty()) {
    err = "no command to run (usage: tuttirun [options] command ...)";
  }
  if (err.empty() && f.o.horovod_compat) {
    std::vector<std::string> rewritten;
    err = horovodCompatCommand(f.o.command, &rewritten);
    if (err.empty()) f.o.command = rewritten;
  }
  return err;
}

CliOutcome usageError(const std::string& message) {
  CliOutcome outcome;
  outcome.exit_code = kExitUsage;
  outcome.err = "tuttirun: " + message + "\n";
  return outcome;
}

}  // namespace

CliOutcome parseCommandLine(const std::vector<std::string>& args, const EnvMap& env,
                            LaunchOptions* options) {
  const std::string see_help = "\nRun 'tuttirun --help' for usage.";
  ParsedFlags f;  // outlives `app`, which writes into it
  CLI::App app{"tuttirun: start a tutti job, one process per rank, locally or over ssh.",
               "tuttirun"};
  app.formatter(std::make_shared<HelpFormatter>());
  app.get_formatter()->column_width(44);
  app.footer(kFooter);
  addJobOptions(app, f);
  addHostOptions(app, f);
  addElasticOptions(app, f);
  addOutputAndInfoOptions(app, f);

  std::vector<std::string> ours;
  std::string split_error = splitOptions(app, args, &ours, &f.o.command);
  if (!split_error.empty()) return usageError(split_error + see_help);
  CliOutcome outcome;
  std::vector<std::string> reversed(ours.rbegin(), ours.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    outcome.out = app.help();
    return outcome;
  } catch (const CLI::ParseError& e) {
    return usageError(e.what() + see_help);
  }
  if (f.version || f.check_build) {
    outcome.out = f.version ? versionText() : checkBuildText();
    return outcome;
  }
  std::string error = checkParsed(app, f, env);
  if (!error.empty()) return usageError(error);
  outcome.run = true;
  *options = f.o;
  return outcome;
}

}  // namespace launcher
}  // namespace tutti
