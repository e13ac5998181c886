#pragma once
// Direct links on the vhost-pci model (docs/direct-link.md): the operator links port A to
// port B (`virtlink ctl link A B`, [[link]] in the config, --link A:B), and the switch hands
// the front-end of B (a virtlink vnf built on the front-end library) A's memory regions,
// ring addresses and eventfds over the link channel (vhost/link_protocol.h). B then serves
// A's rings itself; no PMD thread touches them until the link is revoked.
//
// Revocation: `ctl unlink`, either port's rings or memory changing (the port's
// pause_datapath calls port_changing first), either side disconnecting, or the switch
// stopping. The switch sends kLinkStop and waits up to kReplyTimeoutMs for B's reply (B has
// returned every chain it took and unmapped A's memory) or for the channel to close (B's
// process is gone); A's rings then restart in the switch at their used index. A B that does
// neither keeps A out of the switched path ("quarantined": two devices must never serve one
// ring) until its channel closes.
//
// Fallback: a B whose front-end never asked for the link channel (QEMU, DPDK, a vnf with
// --no-direct-link) or refuses the probe leaves the link "switched" with the reason; the
// switch retries every second, so a link becomes direct when its ports are ready.
//
// Isolation: B receives only the memory of the port the operator linked to it; nothing a
// front-end sends can ask for another port's memory (the channel carries only the
// switch's requests and B's replies).
//
// Runs on the control thread only.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "control/control_server.h"
#include "port/port.h"
#include "port/vhost_port.h"
#include "vhost/channel.h"

namespace vl::app {

class LinkManager final : public port::LinkHooks {
 public:
  /// How long the switch waits for each reply from B (ms).
  static constexpr int kReplyTimeoutMs = 1000;

  explicit LinkManager(std::vector<std::unique_ptr<port::Port>>* ports) : ports_(ports) {}
  ~LinkManager() override = default;

  /// Records the link "B serves A" and tries it at once. `*out`: {a, b, state, why}.
  /// False (with `*err`) only for a request that cannot be recorded (unknown port, a port
  /// already in a link, A == B); a link that stays switched is not an error.
  bool link(const std::string& a, const std::string& b, control::Json* out, std::string* err);
  /// Revokes and forgets the link.
  bool unlink(const std::string& a, const std::string& b, control::Json* out, std::string* err);
  control::Json info() const;
  /// Every second: retries links that are switched, finishes quarantined revocations.
  void on_tick();
  /// Revokes every direct link (the switch is stopping).
  void shutdown();
  /// Adds what B reported for port `p` on revoked links (frames B took from / put into
  /// p's rings, drops by reason) to `s`.
  void add_counters(uint32_t p, port::CounterSnapshot& s) const;
  /// Whether port `p` is in a direct (or quarantined) link, for `ctl ports`.
  const char* role(uint32_t p) const;

  void port_changing(uint32_t port) override;

  /// The links (A, B) by port name, for the state file.
  std::vector<std::pair<std::string, std::string>> pairs() const;
  /// Before port `p` is deleted: revokes and forgets its link. False with `*err` while the
  /// link's revocation waits for B to let go of A's rings (quarantined: retry later).
  bool drop_port(uint32_t p, std::string* err);

 private:
  enum class State : uint8_t { kSwitched, kDirect, kQuarantined };
  struct Link {
    uint32_t a = 0, b = 0;
    State state = State::kSwitched;
    std::string why;        ///< why it is switched (or quarantined)
    std::unique_ptr<vhost::Channel> chan;  ///< our dup of B's link channel while direct
    uint64_t established = 0, revoked = 0;
    bool forget = false;  ///< unlinked while quarantined: dropped once B lets go
  };
  enum class Call : uint8_t { kOk, kTimeout, kClosed, kRefused };

  Link* find(uint32_t port);
  /// Tries to make `l` direct: probes B, pauses A, hands B A's memory table and rings
  /// (vhost/link_protocol.h), then A's rings are B's; on a failure `l` stays switched (or is
  /// revoked, when B may have started).
  void establish(Link& l);
  /// Why `l` cannot be direct now (a port not connected, rings not ready or of a kind links
  /// do not serve, migration, a B without a link channel); empty when it can.
  std::string not_ready(const Link& l);
  /// kLinkMem: A's memory regions and their fds.
  Call send_memory(vhost::Channel& ch, vhost::Backend& be, std::string* err);
  /// kLinkVring for A's vring `i`, with its kick and call eventfds.
  Call send_vring(vhost::Channel& ch, const vhost::Vring& v, uint32_t i, std::string* err);
  void revoke(Link& l, const std::string& reason);
  void finish_revoke(Link& l, const vhost::Message* reply, const std::string& reason);
  Call call(vhost::Channel& ch, vhost::LinkReq req, const void* payload, uint32_t size,
            const int* fds, uint32_t nfds, uint32_t reply_size, std::string* err);
  void set_switched(Link& l, std::string why);
  static const char* state_name(State s);
  control::Json describe(const Link& l) const;
  std::string name(uint32_t p) const;
  /// Port p as a vhost-user port, null if it is another type.
  port::VhostPort* vhost(uint32_t p) const;

  std::vector<std::unique_ptr<port::Port>>* ports_;
  std::vector<Link> links_;
  port::CounterSnapshot reported_[port::kMaxPorts];
  int busy_ = 0;  ///< inside establish/revoke: port_changing calls are ours
};

}  // namespace vl::app
