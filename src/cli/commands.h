#pragma once
// Subcommand definitions: each adds its options to the CLI11 app and runs.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace vl::cli {

struct SwitchArgs {
  std::string offloads;  ///< "on" / "off" for every port; empty: per port (default on)
  std::string config;
  std::string db;  ///< --db FILE: the state file of run-time changes
  int handover_fd = -1;  ///< --handover-fd FD: started by `ctl upgrade` (internal)
  std::vector<std::string> ports;
  std::vector<std::string> port_sets;  ///< --port-set NAME:KEY=VALUE
  std::string dpdk_extra;  ///< --dpdk-extra ARGS (EAL arguments, space separated)
  std::string forward;
  std::string pmd_cores;
  bool pmd_cores_given = false;  ///< --pmd-cores given (an empty list is a usage error)
  std::string pmd_mode;
  std::vector<std::string> flush;  ///< POLICY (every port) or PORT:POLICY
  std::string control;
  std::string control_mode;   ///< octal; empty: the TOML file's or 0600
  std::string control_owner;
  std::string control_group;
  std::string log_file;  ///< --log-file FILE: the log appended there too
  std::string metrics;   ///< --metrics [ADDR:]PORT: the Prometheus endpoint
  uint32_t pmd_idle_us = 0;
  uint32_t mac_aging_s = 0;
  uint32_t burst = 0;
  std::vector<std::string> links;  ///< A:B
  uint32_t mac_table_buckets = 0;
  uint32_t mac_limit = 0;
  bool vlans = false;  ///< --vlans
  std::string socket_mode;
  std::string socket_owner;
  std::string socket_group;
  uint64_t max_guest_memory_gib = 0;
  uint64_t max_total_guest_memory_gib = 0;
  uint32_t max_queues = 0;       ///< 0: per port (default 8)
  std::string pmd_rxq_assign;    ///< roundrobin | cycles
  std::string pmd_rx_writers;    ///< follow | fixed
  int64_t tx_retry_us = -1;      ///< -1: per port (default port::kDefaultTxRetryUs)
  int64_t completion_coalesce_us = -1;  ///< -1: per port (port::kDefaultCompletionCoalesceUs)
};
void add_switch_command(CLI::App& app, SwitchArgs& a);
int run_switch(const SwitchArgs& a);

struct CtlArgs {
  std::string control;
  std::string command;
  std::vector<std::string> args;
  bool json = false;
  bool may_exist = false;  ///< add-port --may-exist
  bool if_exists = false;  ///< del-port --if-exists
  // capture (cli/ctl_capture.cpp)
  std::string file;        ///< the pcap file ctl writes; "-": standard output
  uint64_t count = 0;      ///< frames (0: until stopped)
  uint32_t snaplen = 262144;  ///< bytes kept of each frame
  uint64_t duration_s = 0;    ///< seconds (0: until stopped)
  std::string filter;      ///< a tcpdump filter expression, compiled by ctl (libpcap)
  std::string pcap;        ///< trace --pcap FILE
};
void add_ctl_command(CLI::App& app, CtlArgs& a);
int run_ctl(const CtlArgs& a);
/// `virtlink ctl capture PORT rx|tx|both --file F|- ...`: ctl opens the file and writes
/// the frames the switch streams to it (app/capture.h). Exit status: 0, 1 (a failure: the
/// switch, the file), 2 (usage).
int run_ctl_capture(const CtlArgs& a, const std::string& control_path);

struct TopArgs {
  std::string control;     ///< the switch's control socket ("": control::default_control_path())
  double interval_s = 1;   ///< seconds between polls
  std::string sort = "rx_pps";  ///< a column of app::kTopSortColumns
  bool once = false;       ///< print one frame and exit (also when stdout is not a terminal)
};
void add_top_command(CLI::App& app, TopArgs& a);
int run_top(const TopArgs& a);

struct GenArgs {
  std::vector<std::string> ports;
  double rate_pps = 1e6;
  double rate_percent = 0;
  double link_gbps = 10;
  std::string size = "64";
  uint32_t flows = 1;
  double duration_s = 1;
  bool unidirectional = false;
  bool no_learn = false;
  bool check_payload = false;
  uint32_t queue_size = 256;
  int cpu = -1;
  std::string json_file;
  bool serve = false;
  uint32_t max_lag = 0;
  std::string ring = "split";  ///< split | packed virtqueues
  uint32_t queues = 1;         ///< queue pairs per port
  std::string dpdk_extra;      ///< --dpdk-extra ARGS (EAL arguments for dpdk ports)
};
void add_gen_command(CLI::App& app, GenArgs& a);
int run_gen(const GenArgs& a);

struct VnfArgs {
  std::vector<std::string> ports;
  std::string mode = "io";
  std::string pmd_mode = "poll";
  int cpu = -1;
  double duration_s = 0;
  uint32_t queue_size = 256;
  uint32_t buf_size = 2048;
  bool no_direct_link = false;
};
void add_vnf_command(CLI::App& app, VnfArgs& a);
int run_vnf(const VnfArgs& a);

struct BenchArgs {
  std::string name;
  std::vector<std::string> extra;  ///< the harness's own options, passed through
};
void add_bench_command(CLI::App& app, BenchArgs& a);
int run_bench(const BenchArgs& a);

}  // namespace vl::cli
