// metrics_text (app/metrics_text.h): the Prometheus text format made from the ctl views.
#include "app/metrics_text.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "control/metrics_server.h"
#include "dp/flush.h"

namespace vl::app {
namespace {

using control::Json;

Json one_port() {
  Json buckets = Json::array();
  for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b) buckets.push_back(b == 2 ? 5 : (b == 4 ? 3 : 0));
  return {{"ports",
           {{{"name", "vm\"1"},
             {"type", "vhost-user"},
             {"path", "/tmp/a.sock"},
             {"state", "connected"},
             {"flush", "rx-batch"},
             {"feature_names", {"VIRTIO_NET_F_MRG_RXBUF"}},
             {"rx_packets", 10},
             {"rx_bytes", 640},
             {"tx_packets", 8},
             {"tx_bytes", 512},
             {"tx_retries", 0},
             {"drops", {{"no_rx_buffer", 2}, {"too_big", 0}}},
             {"offload", {{"csum_filled", 1}}},
             {"queue_age_max_ns", 3000},
             {"queue_age_sum_ns", 9000},
             {"queue_age_buckets", buckets},
             {"queues", {{{"queue", 0}, {"rx_packets", 10}, {"tx_packets", 8}}}}}}},
          {"control", {{"accepted", 4}}},
          {"guest_memory", {{"mapped_bytes", 1 << 20}}}};
}

Json one_pmd() {
  return Json::array({{{"pmd", 0},
                       {"cpu", 1},
                       {"mode", "poll"},
                       {"packets", 18},
                       {"busy_cycles", 1800},
                       {"elapsed_cycles", 3600},
                       {"busy_pct", 50.0},
                       {"cycles_per_packet", 100.0},
                       {"rxq_loads", {{{"port", "vm\"1"}, {"queue", 0}, {"packets", 10}, {"cycles", 900}}}}}});
}

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

TEST(MetricsText, CountersWithLabelsHelpAndType) {
  const std::string t = metrics_text(one_port(), one_pmd(), {{"switch", {{"version", "0.1.0"}, {"forward", "bridge"}}}});
  EXPECT_TRUE(has_line(t, "# TYPE virtlink_port_rx_packets_total counter")) << t;
  EXPECT_TRUE(has_line(t, "virtlink_port_rx_packets_total{port=\"vm\\\"1\"} 10")) << t;
  EXPECT_TRUE(has_line(t, "virtlink_port_tx_bytes_total{port=\"vm\\\"1\"} 512"));
  EXPECT_TRUE(has_line(t, "virtlink_port_drops_total{port=\"vm\\\"1\",reason=\"no_rx_buffer\"} 2"));
  EXPECT_TRUE(has_line(t, "virtlink_port_drops_total{port=\"vm\\\"1\",reason=\"too_big\"} 0"));
  EXPECT_TRUE(has_line(t, "virtlink_port_up{port=\"vm\\\"1\"} 1"));
  EXPECT_TRUE(has_line(t, "virtlink_port_feature{port=\"vm\\\"1\",feature=\"VIRTIO_NET_F_MRG_RXBUF\"} 1"));
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_rx_packets_total{port=\"vm\\\"1\",queue=\"0\"} 10"));
  EXPECT_TRUE(has_line(t, "virtlink_pmd_busy_cycles_total{pmd=\"0\"} 1800"));
  EXPECT_TRUE(has_line(t, "virtlink_pmd_busy_ratio{pmd=\"0\"} 0.5"));
  EXPECT_TRUE(has_line(t, "virtlink_pmd_rxq_cycles_total{pmd=\"0\",port=\"vm\\\"1\",queue=\"0\"} 900"));
  EXPECT_TRUE(has_line(t, "virtlink_info{version=\"0.1.0\",forward=\"bridge\",pmd_mode=\"\"} 1"));
  EXPECT_TRUE(has_line(t, "virtlink_control_accepted_total 4"));
  EXPECT_TRUE(has_line(t, "virtlink_guest_memory_mapped_bytes 1048576"));
  // One HELP and TYPE per family, before its samples.
  EXPECT_EQ(t.find("# TYPE virtlink_port_drops_total"), t.rfind("# TYPE virtlink_port_drops_total"));
  EXPECT_LT(t.find("# TYPE virtlink_port_drops_total"), t.find("virtlink_port_drops_total{"));
}

TEST(MetricsText, QueueAgeIsACumulativeHistogramInSeconds) {
  const std::string t = metrics_text(one_port(), Json::array(), Json::object());
  EXPECT_TRUE(has_line(t, "# TYPE virtlink_port_queue_age_seconds histogram")) << t;
  // Bucket 1 (below 512 ns) holds nothing yet, bucket 2 (below 1024 ns) 5, bucket 4 3 more.
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_age_seconds_bucket{port=\"vm\\\"1\",le=\"5.12e-07\"} 0")) << t;
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_age_seconds_bucket{port=\"vm\\\"1\",le=\"1.024e-06\"} 5"));
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_age_seconds_bucket{port=\"vm\\\"1\",le=\"4.096e-06\"} 8"));
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_age_seconds_bucket{port=\"vm\\\"1\",le=\"+Inf\"} 8"));
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_age_seconds_count{port=\"vm\\\"1\"} 8"));
  EXPECT_TRUE(has_line(t, "virtlink_port_queue_age_seconds_sum{port=\"vm\\\"1\"} 9e-06"));
}

TEST(MetricsText, TheEndpointsOwnCounters) {
  const std::string t = metrics_text(Json::object(), Json::array(), Json::object(), {{"scrapes", 7}, {"stale", 1}});
  EXPECT_TRUE(has_line(t, "virtlink_metrics_scrapes_total 7")) << t;
  EXPECT_TRUE(has_line(t, "virtlink_metrics_stale_total 1"));
  EXPECT_TRUE(has_line(t, "# TYPE virtlink_metrics_scrapes_total counter"));
}

TEST(MetricsText, LabelEscaping) {
  EXPECT_EQ(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_label("plain"), "plain");
}

TEST(MetricsServer, ListenSpecs) {
  std::string a, err;
  uint16_t p = 0;
  ASSERT_TRUE(control::MetricsServer::parse_listen("9100", &a, &p, &err)) << err;
  EXPECT_EQ(a, "127.0.0.1");
  EXPECT_EQ(p, 9100);
  ASSERT_TRUE(control::MetricsServer::parse_listen("0.0.0.0:9200", &a, &p, &err));
  EXPECT_EQ(a, "0.0.0.0");
  ASSERT_TRUE(control::MetricsServer::parse_listen("[::1]:9300", &a, &p, &err));
  EXPECT_EQ(a, "::1");
  EXPECT_EQ(p, 9300);
  for (const char* bad : {"", "x", "70000", "host:9100", "1.2.3.4:", ":9100", "[::1]", "9100x"})
    EXPECT_FALSE(control::MetricsServer::parse_listen(bad, &a, &p, &err)) << bad;
}

}  // namespace
}  // namespace vl::app
