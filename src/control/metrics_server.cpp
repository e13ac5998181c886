#include "control/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <microhttpd.h>

#include "util/log.h"

namespace vl::control {

/// libmicrohttpd's request callback, on one of its threads (one per connection).
struct MetricsRequest {
  static MHD_Result on_request(void* cls, MHD_Connection* c, const char* url, const char* method,
                               const char*, const char*, size_t* upload_size, void** state) {
    auto* self = static_cast<MetricsServer*>(cls);
    static int first;  // marks a request's first call: its headers only
    if (*state == nullptr) {
      *state = &first;
      return MHD_YES;
    }
    *upload_size = 0;  // a body (there should be none for GET) is ignored
    const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (!head && std::strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
      self->counters_.bad_method.fetch_add(1, std::memory_order_relaxed);
      return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n", "text/plain", true);
    }
    if (std::strcmp(url, "/metrics") != 0) {
      self->counters_.not_found.fetch_add(1, std::memory_order_relaxed);
      return reply(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n", "text/plain", false);
    }
    const std::shared_ptr<const std::string> body = self->fresh_body();
    if (!body) return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no metrics yet\n", "text/plain", false);
    self->counters_.scrapes.fetch_add(1, std::memory_order_relaxed);
    return reply(c, MHD_HTTP_OK, *body, "text/plain; version=0.0.4; charset=utf-8", false);
  }

  static MHD_Result reply(MHD_Connection* c, unsigned status, const std::string& text,
                          const char* type, bool allow) {
    MHD_Response* r = MHD_create_response_from_buffer(text.size(), const_cast<char*>(text.data()),
                                                      MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (allow) MHD_add_response_header(r, "Allow", "GET, HEAD");
    const MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
  }
};

namespace {

/// libmicrohttpd's own messages, at debug level (a hostile client makes many).
void mhd_log(void*, const char* fmt, va_list ap) {
  char line[512];
  std::vsnprintf(line, sizeof line, fmt, ap);
  spdlog::debug("metrics: {}", line);
}

}  // namespace

MetricsServer::MetricsServer() : wake_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::parse_listen(const std::string& spec, std::string* addr, uint16_t* port,
                                 std::string* err) {
  std::string a = "127.0.0.1", p = spec;
  if (const size_t colon = spec.rfind(':'); colon != std::string::npos) {
    a = spec.substr(0, colon);
    p = spec.substr(colon + 1);
    if (a.size() >= 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  }
  const bool digits = !p.empty() && p.size() <= 5 && p.find_first_not_of("0123456789") == std::string::npos;
  in6_addr v6;
  in_addr v4;
  if (!digits || std::stoul(p) > 65535 ||
      (inet_pton(AF_INET, a.c_str(), &v4) != 1 && inet_pton(AF_INET6, a.c_str(), &v6) != 1)) {
    *err = fmt::format("--metrics '{}': expected [ADDR:]PORT (an IPv4 address or [IPv6], and a "
                       "port 0..65535; a port alone listens on 127.0.0.1)", spec);
    return false;
  }
  *addr = a;
  *port = static_cast<uint16_t>(std::stoul(p));
  return true;
}

bool MetricsServer::start(const std::string& spec, std::string* err, int adopt_fd) {
  std::string addr;
  uint16_t port;
  if (!parse_listen(spec, &addr, &port, err)) return false;
  if (!wake_.valid()) {
    *err = fmt::format("metrics: eventfd: {}", strerror(errno));
    return false;
  }
  sockaddr_storage ss{};
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
  if (inet_pton(AF_INET, addr.c_str(), &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr) == 1) {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
  } else {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_pton(AF_INET6, addr.c_str(), &s6->sin6_addr);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    flags |= MHD_USE_IPv6;
  }
  daemon_ = MHD_start_daemon(
      flags, port, nullptr, nullptr, &MetricsRequest::on_request, this,
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&ss),
      MHD_OPTION_LISTEN_SOCKET, adopt_fd,  // -1 (MHD_INVALID_SOCKET): MHD makes its own
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, kPerIp,
      MHD_OPTION_CONNECTION_TIMEOUT, kTimeoutS,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kMemoryLimit,
      MHD_OPTION_EXTERNAL_LOGGER, &mhd_log, nullptr,
      MHD_OPTION_END);
  if (!daemon_) {
    *err = fmt::format("metrics: cannot listen on {}:{} (address in use or not this host's?)", addr, port);
    return false;
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info ? info->port : port;
  spdlog::info("metrics: serving http://{}{}{}:{}/metrics", flags & MHD_USE_IPv6 ? "[" : "", addr,
               flags & MHD_USE_IPv6 ? "]" : "", port_);
  return true;
}

int MetricsServer::listen_fd() const {
  const MHD_DaemonInfo* info = daemon_ ? MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_LISTEN_FD) : nullptr;
  return info ? info->listen_fd : -1;
}

void MetricsServer::stop() {
  if (!daemon_) return;
  MHD_stop_daemon(daemon_);  // joins its threads (a waiting scrape waits at most kFreshMs)
  daemon_ = nullptr;
}

std::shared_ptr<const std::string> MetricsServer::fresh_body() {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t want = generation_ + 1;
  if (wanted_ < want) wanted_ = want;
  const uint64_t one = 1;
  if (write(wake_.get(), &one, sizeof one) < 0) {  // full (never, in practice): the next wakes it
  }
  made_.wait_for(l, std::chrono::milliseconds(kFreshMs), [&] { return generation_ >= want; });
  if (generation_ < want) counters_.stale.fetch_add(1, std::memory_order_relaxed);
  return body_;
}

void MetricsServer::serve(const std::function<std::string()>& render) {
  uint64_t n;
  if (read(wake_.get(), &n, sizeof n) < 0) {  // EAGAIN: woken for nothing
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (wanted_ <= generation_) return;
  }
  auto body = std::make_shared<const std::string>(render());
  std::lock_guard<std::mutex> l(mu_);
  body_ = std::move(body);
  ++generation_;
  made_.notify_all();
}

}  // namespace vl::control
