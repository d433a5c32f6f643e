#include "launcher/hosts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>

namespace tutti {
namespace launcher {
namespace {

TEST(HostList, ParsesHostsAndSlots) {
  std::vector<HostSlots> hosts;
  ASSERT_TRUE(parseHostList("a:2,b:3,c", &hosts).isOk());
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "a");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "b");
  EXPECT_EQ(hosts[1].slots, 3);
  EXPECT_EQ(hosts[2].host, "c");
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(totalSlots(hosts), 6);
}

TEST(HostList, MergesRepeatedHosts) {
  std::vector<HostSlots> hosts;
  ASSERT_TRUE(parseHostList("a:2,b:1,a:1", &hosts).isOk());
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].slots, 3);
}

TEST(HostList, AcceptsAddresses) {
  std::vector<HostSlots> hosts;
  ASSERT_TRUE(parseHostList("127.0.0.2:2,127.0.0.3:2", &hosts).isOk());
  EXPECT_EQ(hosts[1].host, "127.0.0.3");
}

TEST(HostList, RejectsBadEntries) {
  std::vector<HostSlots> hosts;
  for (const char* bad :
       {"", "a:0", "a:-1", "a:x", ":2", "a:2,,b:1", "a:2,", "a b:2", "a:2:3x", "a:99999999999"}) {
    Status st = parseHostList(bad, &hosts);
    EXPECT_FALSE(st.isOk()) << bad;
    EXPECT_NE(st.message().find("-H"), std::string::npos) << st.message();
  }
}

TEST(Hostfile, ParsesSlotsCommentsAndBlankLines) {
  std::vector<HostSlots> hosts;
  const char* text =
      "# cluster\n"
      "\n"
      "w0 slots=4   # the first\n"
      "  w1 slots=2\n"
      "w2\n";
  ASSERT_TRUE(parseHostfile(text, "hosts.txt", &hosts).isOk());
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "w0");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);
}

TEST(Hostfile, RejectsBadLinesNamingTheLine) {
  struct Case {
    const char* text;
    const char* where;
  };
  for (const Case& c :
       {Case{"w0 slots=2\nw1 slots=zero\n", "hosts.txt:2:"},
        Case{"# c\n\nw0 cores=2\n", "hosts.txt:3:"}, Case{"w0 slots=2 extra\n", "hosts.txt:1:"},
        Case{"w0 slots=0\n", "hosts.txt:1:"}, Case{"w0\nw$1 slots=1\n", "hosts.txt:2:"}}) {
    std::vector<HostSlots> hosts;
    Status st = parseHostfile(c.text, "hosts.txt", &hosts);
    ASSERT_FALSE(st.isOk()) << c.text;
    EXPECT_EQ(st.message().rfind(c.where, 0), 0u) << st.message();
  }
}

// "host:slots" is -H syntax; in a hostfile it used to become a host named
// "w1:4" with one slot.
TEST(Hostfile, HostColonSlotsLineIsAnErrorSayingTheAcceptedForms) {
  std::vector<HostSlots> hosts;
  Status st = parseHostfile("w0 slots=2\nw1:4\n", "hosts.txt", &hosts);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message().rfind("hosts.txt:2: ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("'host' (1 slot) or 'host slots=N', got 'w1:4'"), std::string::npos)
      << st.message();
  // IPv6 addresses (two or more colons) are still hosts.
  ASSERT_TRUE(parseHostfile("fe80::1 slots=2\n", "hosts.txt", &hosts).isOk());
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].host, "fe80::1");
  EXPECT_EQ(hosts[0].slots, 2);
}

TEST(Hostfile, EmptyFileIsAnError) {
  std::vector<HostSlots> hosts;
  EXPECT_FALSE(parseHostfile("# nothing\n\n", "h", &hosts).isOk());
}

TEST(Hostfile, MissingFileIsAnError) {
  std::vector<HostSlots> hosts;
  Status st = readHostfile("/nonexistent/hosts", &hosts);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("/nonexistent/hosts"), std::string::npos);
}

TEST(Hosts, LocalAndLoopback) {
  char name[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(isLocalHost("localhost"));
  EXPECT_TRUE(isLocalHost("127.0.0.1"));
  EXPECT_TRUE(isLocalHost(name));
  EXPECT_FALSE(isLocalHost("127.0.0.2"));
  EXPECT_FALSE(isLocalHost("10.1.2.3"));
  EXPECT_TRUE(isLoopbackHost("127.0.0.2"));
  EXPECT_FALSE(isLoopbackHost("10.1.2.3"));
}

TEST(Hosts, NamesOfThisMachineAreOneHost) {
  char name[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  std::vector<HostSlots> hosts;
  ASSERT_TRUE(parseHostList("localhost:2,127.0.0.1:2," + std::string(name) + ":1", &hosts).isOk());
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].host, "localhost");
  EXPECT_EQ(hosts[0].slots, 5);
  ASSERT_TRUE(
      parseHostfile("127.0.0.1 slots=2\n127.0.0.2 slots=1\nlocalhost slots=3\n", "h", &hosts)
          .isOk());
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "127.0.0.1");
  EXPECT_EQ(hosts[0].slots, 5);
  EXPECT_EQ(hosts[1].host, "127.0.0.2");  // another loopback address: another host
}

}  // namespace
}  // namespace launcher
}  // namespace tutti
