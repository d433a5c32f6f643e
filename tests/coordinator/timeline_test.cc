// The timeline (coordinator/timeline.h): file naming, start/stop errors, the
// spans of single and fused allreduces per tensor track on 3 thread ranks,
// rank 0's per-rank "ready" marks, cycle marks, and a SIGKILLed job whose file
// still loads once "]" is appended (what Chrome's and Perfetto's loaders do).

#include "coordinator/timeline.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process_harness.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

using json = nlohmann::json;

constexpr double kEpsilonUs = 1e-3;

std::string makeTempDir() {
  char tmpl[] = "/tmp/tutti_timeline_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  return dir == nullptr ? "/tmp" : dir;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What the trace viewers do with an array that lacks its closing bracket.
json loadLikeAViewer(std::string text) {
  const size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos || text[end] != ']') text += "]";
  return json::parse(text);
}

// thread_name metadata: tensor name -> tid.
std::map<std::string, int> tracks(const json& events) {
  std::map<std::string, int> out;
  for (const json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      out[e["args"]["name"].get<std::string>()] = e["tid"].get<int>();
    }
  }
  return out;
}

// Events of one track, of phase `ph`, sorted by ts.
std::vector<json> onTrack(const json& events, int tid, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : events) {
    if (e.value("ph", "") == ph && e.value("tid", -1) == tid) out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return a["ts"].get<double>() < b["ts"].get<double>();
  });
  return out;
}

// The spans of `tid` are `pattern` repeated `times`, in time order, without
// overlap; returns the spans.
std::vector<json> expectSpans(const json& events, int tid, const std::vector<std::string>& pattern,
                              int times) {
  std::vector<json> spans = onTrack(events, tid, "X");
  std::vector<std::string> names, expected;
  for (const json& s : spans) names.push_back(s["name"].get<std::string>());
  for (int i = 0; i < times; ++i) expected.insert(expected.end(), pattern.begin(), pattern.end());
  EXPECT_EQ(names, expected) << "track " << tid;
  for (size_t i = 1; i < spans.size(); ++i) {
    const double prev_end = spans[i - 1]["ts"].get<double>() + spans[i - 1]["dur"].get<double>();
    EXPECT_GE(spans[i]["ts"].get<double>() + kEpsilonUs, prev_end)
        << spans[i - 1].dump() << " overlaps " << spans[i].dump();
  }
  return spans;
}

TEST(TimelineFileNameTest, InsertsTheRankBeforeTheExtension) {
  EXPECT_EQ(timelineFileName("timeline.json", 0), "timeline.rank0.json");
  EXPECT_EQ(timelineFileName("/a.b/trace", 12), "/a.b/trace.rank12");
  EXPECT_EQ(timelineFileName("dir/t.x.json", 3), "dir/t.x.rank3.json");
  EXPECT_EQ(timelineFileName(".trace", 1), ".trace.rank1");
}

TEST(TimelineTest, StartAndStopErrors) {
  const std::string dir = makeTempDir();
  Timeline t;
  EXPECT_TRUE(t.stop().isOk()) << "stop without start is a no-op";
  EXPECT_EQ(t.start("", 0, false).code(), StatusCode::kInvalidArgument);
  Status st = t.start(dir + "/missing/dir/t.json", 0, false);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("missing/dir/t.rank0.json"), std::string::npos) << st.message();
  // A directory (it used to get 'dir.rank0', or a hidden 'dir/.rank0').
  for (const std::string& d : {dir, dir + "/"}) {
    st = t.start(d, 0, false);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find("'" + d + "' is a directory; give a file path such as '" + dir +
                                "/timeline.json'"),
              std::string::npos)
        << st.message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + ".rank0"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/.rank0"));
  ASSERT_TRUE(t.start(dir + "/t.json", 4, false).isOk());
  st = t.start(dir + "/u.json", 4, false);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("t.rank4.json"), std::string::npos) << st.message();
  EXPECT_TRUE(t.stop().isOk());
  // An empty timeline is complete JSON with the process name.
  const json events = json::parse(readFile(dir + "/t.rank4.json"));
  ASSERT_TRUE(events.is_array());
  EXPECT_EQ(events[0]["args"]["name"], "rank 4");
  // It can start again after stop.
  ASSERT_TRUE(t.start(dir + "/u.json", 4, true).isOk());
  EXPECT_TRUE(t.stop().isOk());
  std::filesystem::remove_all(dir);
}

// SpansPerTensorAndReadyMarksOfEveryRank's job: kSteps times a single
// allreduce and a grouped one of kGroup tensors, on kRanks ranks.
constexpr int kRanks = 3;
constexpr int kSteps = 3;
constexpr int kGroup = 4;
constexpr int64_t kCount = 1000;

void runTimelineSteps(Runtime& rt) {
  std::vector<float> in(kCount, 1.0f), out(kCount);
  std::vector<std::vector<float>> gin(kGroup, std::vector<float>(kCount, 2.0f));
  std::vector<std::vector<float>> gout(kGroup, std::vector<float>(kCount));
  for (int step = 0; step < kSteps; ++step) {
    OpOptions single;
    single.name = "single";
    Handle h;
    ASSERT_TRUE(rt.allreduce({in.data(), DataType::kFloat32, {kCount}},
                             {out.data(), DataType::kFloat32, {kCount}}, single, &h)
                    .isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    ASSERT_TRUE(rt.release(h).isOk());
    EXPECT_EQ(out[0], float(kRanks));
    // A grouped allreduce is always fused into one response.
    std::vector<TensorView> ins, outs;
    for (int i = 0; i < kGroup; ++i) {
      ins.push_back({gin[i].data(), DataType::kFloat32, {kCount}});
      outs.push_back({gout[i].data(), DataType::kFloat32, {kCount}});
    }
    OpOptions group;
    group.name = "grp";
    std::vector<Handle> handles;
    ASSERT_TRUE(rt.groupedAllreduce(ins, outs, group, &handles).isOk());
    for (Handle g : handles) {
      ASSERT_TRUE(rt.wait(g, 20).isOk());
      ASSERT_TRUE(rt.release(g).isOk());
    }
    EXPECT_EQ(gout[kGroup - 1][kCount - 1], 2.0f * kRanks);
  }
}

// The single and grouped tensors' spans, with their op arguments.
void expectTensorSpans(const json& events, const std::map<std::string, int>& tids) {
  const std::vector<json> single =
      expectSpans(events, tids.at("single"), {"NEGOTIATE", "QUEUE", "ALLREDUCE"}, kSteps);
  for (const json& s : single) {
    if (s["name"] != "ALLREDUCE") continue;
    EXPECT_EQ(s["args"]["tensors"], 1);
    EXPECT_EQ(s["args"]["bytes"], kCount * 4);
    EXPECT_EQ(s["args"]["dtype"], "float32");
  }
  for (int i = 0; i < kGroup; ++i) {
    const std::string name = "grp." + std::to_string(i);
    ASSERT_EQ(tids.count(name), 1u) << name;
    const std::vector<json> spans = expectSpans(
        events, tids.at(name),
        {"NEGOTIATE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"},
        kSteps);
    for (const json& s : spans) {
      if (s["name"] != "ALLREDUCE") continue;
      EXPECT_EQ(s["args"]["tensors"], kGroup);
      EXPECT_EQ(s["args"]["bytes"], kGroup * kCount * 4);
    }
  }
}

// Rank 0's ready marks on one tensor's track: one per rank and step, each
// inside a NEGOTIATE span.
void expectReadyMarks(const json& events, int tid) {
  const std::vector<json> marks = onTrack(events, tid, "i");
  ASSERT_EQ(marks.size(), size_t{kRanks * kSteps});
  std::vector<int> per_rank(kRanks, 0);
  const std::vector<json> spans = onTrack(events, tid, "X");
  for (const json& m : marks) {
    const int r = m["args"]["rank"].get<int>();
    ASSERT_TRUE(r >= 0 && r < kRanks) << m.dump();
    ++per_rank[r];
    EXPECT_EQ(m["name"], "rank " + std::to_string(r) + " ready");
    const double ts = m["ts"].get<double>();
    bool inside = false;
    for (const json& s : spans) {
      const double begin = s["ts"].get<double>();
      const double end = begin + s["dur"].get<double>();
      if (s["name"] == "NEGOTIATE" && ts + kEpsilonUs >= begin && ts <= end + kEpsilonUs) {
        inside = true;
      }
    }
    EXPECT_TRUE(inside) << "mark outside every NEGOTIATE span: " << m.dump();
  }
  EXPECT_EQ(per_rank, std::vector<int>(kRanks, kSteps));
}

TEST(TimelineTest, SpansPerTensorAndReadyMarksOfEveryRank) {
  const std::string dir = makeTempDir();
  RankSync sync(kRanks);
  runThreadRanks(kRanks, [&](Runtime& rt) {
    ASSERT_TRUE(rt.startTimeline(dir + "/tl.json", /*mark_cycles=*/true).isOk());
    // Rank 0 records the requests of every rank once its timeline runs.
    sync.arriveAndWait();
    runTimelineSteps(rt);
    ASSERT_TRUE(rt.stopTimeline().isOk());
  });

  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string text = readFile(dir + "/tl.rank" + std::to_string(rank) + ".json");
    ASSERT_FALSE(text.empty());
    const json events = json::parse(text);  // stopped: complete JSON, "]" included
    ASSERT_TRUE(events.is_array());
    for (const json& e : events) EXPECT_EQ(e["pid"], rank) << e.dump();
    const std::map<std::string, int> tids = tracks(events);
    ASSERT_EQ(tids.count("single"), 1u);
    ASSERT_EQ(tids.count("cycles"), 1u);
    EXPECT_EQ(tids.at("cycles"), 0);
    EXPECT_FALSE(onTrack(events, 0, "i").empty()) << "CYCLE marks";
    expectTensorSpans(events, tids);

    // Ready marks: rank 0 only, one per rank and step, inside a NEGOTIATE.
    for (const auto& [name, tid] : tids) {
      if (name == "cycles") continue;
      SCOPED_TRACE(name);
      if (rank != 0) {
        EXPECT_TRUE(onTrack(events, tid, "i").empty());
        continue;
      }
      expectReadyMarks(events, tid);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(TimelineTest, KilledJobLeavesALoadableFile) {
  const std::string dir = makeTempDir();
  const std::string base = dir + "/killed.json";
  ClusterOptions options;
  options.timeout_seconds = 5;
  ProcessPlan plan;
  plan.kill_rank = 1;
  plan.kill_delay_seconds = 0.5;  // several flush intervals into the run
  plan.require_clean_shutdown = false;
  plan.deadline_seconds = 60;
  auto body = [&](Runtime& rt, ProcessRank& self) {
    if (!self.check(rt.startTimeline(base).isOk(), "startTimeline")) return;
    std::vector<float> x(256, 1.0f);
    for (int step = 0;; ++step) {
      OpOptions o;
      o.name = "t" + std::to_string(step % 8);
      Handle h;
      if (!rt.allreduce({x.data(), DataType::kFloat32, {256}},
                        {x.data(), DataType::kFloat32, {256}}, o, &h)
               .isOk()) {
        return;
      }
      const bool ok = rt.wait(h, 10).isOk();
      (void)rt.release(h);
      if (!ok) return;  // rank 1 was killed: rank 0 sees a lost peer
      if (step == 20) self.signalReady();
      if (step % 64 == 0) x.assign(x.size(), 1.0f);  // keep the values finite
    }
  };
  const auto results = runProcessRanks(2, body, options, plan);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].term_signal, SIGKILL) << results[1].describe();
  EXPECT_TRUE(results[0].exited) << results[0].describe();

  const std::string killed = readFile(dir + "/killed.rank1.json");
  ASSERT_FALSE(killed.empty());
  EXPECT_NE(killed.back(), ']') << "a killed writer never closed the array";
  json events;
  ASSERT_NO_THROW(events = loadLikeAViewer(killed)) << killed.substr(killed.size() - 300);
  ASSERT_TRUE(events.is_array());
  int collectives = 0;
  for (const json& e : events) collectives += e.value("name", "") == "ALLREDUCE";
  EXPECT_GT(collectives, 0) << "events written before the kill";
  // The survivor's file was closed by its shutdown: complete JSON.
  EXPECT_NO_THROW(json::parse(readFile(dir + "/killed.rank0.json")));
  std::filesystem::remove_all(dir);
}

// Issue 2: a burst of 200 small gradients is fused into a few collectives
// (the timeline shows which tensors each collective carried), and every
// result is right.
TEST(FusionTest, TwoHundredSmallTensorsFuseIntoFewCollectives) {
  constexpr int kSize = 3;
  constexpr int kTensors = 200;
  const std::string dir = makeTempDir();
  RankSync sync(kSize);
  runThreadRanks(kSize, [&](Runtime& rt) {
    ASSERT_TRUE(rt.startTimeline(dir + "/fuse.json", /*mark_cycles=*/false).isOk());
    sync.arriveAndWait();
    std::vector<std::vector<float>> bufs(kTensors);
    std::vector<Handle> handles(kTensors);
    for (int t = 0; t < kTensors; ++t) {
      bufs[t].assign(1 + t % 37, static_cast<float>(t + rt.rank()));
      TensorView v{bufs[t].data(), DataType::kFloat32, {static_cast<int64_t>(bufs[t].size())}};
      OpOptions o;
      o.name = "grad." + std::to_string(t);
      ASSERT_TRUE(rt.allreduce(v, v, o, &handles[t]).isOk());
    }
    for (int t = 0; t < kTensors; ++t) {
      ASSERT_TRUE(rt.wait(handles[t], 30).isOk()) << t;
      for (float x : bufs[t]) ASSERT_EQ(x, float(kSize * t + kSize * (kSize - 1) / 2)) << t;
    }
    ASSERT_TRUE(rt.stopTimeline().isOk());
  });
  const json events = json::parse(readFile(dir + "/fuse.rank0.json"));
  // One ALLREDUCE span per tensor; spans of one fused collective share their
  // start time and carry the number of tensors fused.
  std::map<double, int> tensors_per_collective;
  int spans = 0;
  for (const json& e : events) {
    if (e.value("ph", "") != "X" || e.value("name", "") != "ALLREDUCE") continue;
    ++spans;
    tensors_per_collective[e["ts"].get<double>()] = e["args"]["tensors"].get<int>();
  }
  EXPECT_EQ(spans, kTensors);
  int covered = 0;
  for (const auto& [ts, n] : tensors_per_collective) covered += n;
  EXPECT_EQ(covered, kTensors);
  EXPECT_LE(tensors_per_collective.size(), 10u)
      << "200 small tensors enqueued at once ran as " << tensors_per_collective.size()
      << " collectives: they were not fused";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace test
}  // namespace tutti
