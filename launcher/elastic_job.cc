#include "launcher/elastic_job.h"

#include <chrono>
#include <memory>
#include <set>

#include "launcher/discovery.h"
#include "launcher/elastic_driver.h"
#include "launcher/job.h"
#include "launcher/output.h"

namespace tutti {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;

// How often the event loop reads lost-rank reports (and discovery results):
// a report of a link down turns into a new generation within this.
constexpr int kTickMs = 50;
constexpr double kDiscoveryIntervalSeconds = 1;
constexpr double kDiscoveryTimeoutSeconds = 30;
constexpr double kFailedReadSeconds = 1;

class ElasticJob : public ElasticActions {
 public:
  ElasticJob(const LaunchOptions& o, const JobEnv& job_env, const StartOptions& start,
             RendezvousServer& server)
      : options_(o),
        job_env_(job_env),
        start_(start),
        server_(server),
        job_(jobConfig(o)),
        driver_(driverOptions(o), *this) {
    job_env_.remote_hostname = start_.rsh_agent.empty();
    if (!o.discovery_script.empty()) {
      poller_ =
          std::make_unique<DiscoveryPoller>(o.discovery_script, o.slots_per_host,
                                            kDiscoveryIntervalSeconds, kDiscoveryTimeoutSeconds);
    }
  }

  int run(const std::vector<HostSlots>& hosts) {
    hosts_ = hosts;
    Status st = job_.start({});
    if (!st.isOk()) {
      log(st.message());
      return kExitStartFailed;
    }
    driver_.start(hosts, Clock::now());
    if (poller_) poller_->start();
    int code = job_.wait();
    poller_.reset();  // joins its thread before the job's objects go
    return code;
  }

  Status startWorker(int id, const std::string& host) override {
    int slots = 1;
    for (const auto& h : hosts_) {
      if (h.host == host) slots = h.slots;
    }
    RankPlacement p;
    p.rank = id;
    p.host = host;
    p.local_size = slots;
    bool remote = !isLocalHost(host);
    EnvMap env = workerEnvironment(id, formatNumber(options_.elastic_timeout_seconds), host, slots,
                                   remote, job_env_);
    RankLaunch launch;
    Status st = makeLaunch(p, remote, env, slots, "worker", start_, &launch);
    if (!st.isOk()) return st;
    launch.rsh_agent = remote && !start_.rsh_agent.empty();
    if (options_.verbose) {
      log("worker " + std::to_string(id) + " -> " + host + " " + launchVia(remote, start_));
    }
    return job_.add(std::move(launch));
  }

  void stopWorker(int id) override { job_.stop(id); }
  void publish(const std::string& key, const std::string& value) override {
    server_.set(key, value);
  }
  // A failed job leaves the workers a moment to read elastic/failed (they
  // poll every 20 ms) and exit with the driver's message before SIGTERM.
  void endJob(int exit_code, const std::string& why) override {
    job_.end(exit_code, why, exit_code == kExitOk ? 0 : kFailedReadSeconds);
  }
  void log(const std::string& text) override {
    std::string line = "tuttirun: " + text + "\n";
    writeAll(2, line.data(), line.size());
  }
  bool joined(int generation, int rank) override {
    std::string value;
    return server_.get(elastic_keys::rankAddress(generation, rank), &value);
  }

 private:
  // The callbacks run only inside job_.wait(), when every member exists.
  JobConfig jobConfig(const LaunchOptions& o) {
    JobConfig c;
    c.on_exit = [this](const RankExit& e) {
      driver_.onWorkerExit(e.id, e.failed, e.stopped, e.description, Clock::now());
    };
    c.on_tick = [this] { tick(); };
    c.start_timeout_seconds = 0;  // workers check in per generation, not per rank
    c.grace_seconds = o.grace_seconds;
    c.verbose = o.verbose;
    c.noun = "worker";
    c.tick_ms = kTickMs;
    return c;
  }

  static ElasticOptions driverOptions(const LaunchOptions& o) {
    ElasticOptions e;
    e.np = o.np;
    e.min_np = o.min_np;
    e.max_np = o.max_np;
    e.elastic_timeout_seconds = o.elastic_timeout_seconds;
    e.reset_limit = o.reset_limit;
    e.cooldown_min_seconds = o.cooldown_min_seconds;
    e.cooldown_max_seconds = o.cooldown_max_seconds;
    return e;
  }

  void tick() {
    auto now = Clock::now();
    if (poller_ && !job_.stopping()) {
      Status st;
      std::vector<HostSlots> hosts;
      if (poller_->take(&st, &hosts)) {
        std::string line = discovery_log_.onResult(st, now);
        if (!line.empty()) log(line);
        if (st.isOk()) {
          hosts_ = hosts;
          driver_.onHosts(hosts, now);
        }
      }
    }
    std::vector<ElasticReport> reports;
    for (const auto& key : server_.keys(elastic_keys::reportPrefix())) {
      if (!seen_reports_.insert(key).second) continue;
      ElasticReport r;
      std::string value;
      int64_t generation = 0;
      if (elastic_keys::parseReport(key, &generation, &r.reporter) && server_.get(key, &value) &&
          elastic_keys::parseReportValue(value, &r.lost_rank)) {
        r.generation = static_cast<int>(generation);
        reports.push_back(r);
      } else {
        log("elastic: ignoring a malformed report: " + key + " = '" + value + "'");
      }
    }
    if (!reports.empty()) driver_.onReports(reports, now);
    driver_.onTick(now);
  }

  const LaunchOptions& options_;
  JobEnv job_env_;
  StartOptions start_;
  RendezvousServer& server_;
  Job job_;
  ElasticDriver driver_;
  std::unique_ptr<DiscoveryPoller> poller_;
  DiscoveryFailureLog discovery_log_;  // a failing script: first failure, changes, once a minute
  std::vector<HostSlots> hosts_;       // the latest list (slots for OMP_NUM_THREADS)
  std::set<std::string> seen_reports_;
};

}  // namespace

int runElasticJob(const LaunchOptions& options, const JobEnv& job_env, const StartOptions& start,
                  const std::vector<HostSlots>& hosts, RendezvousServer& server) {
  ElasticJob job(options, job_env, start, server);
  return job.run(hosts);
}

}  // namespace launcher
}  // namespace tutti
