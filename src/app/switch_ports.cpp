// Ports at run time: `ctl add-port`, `del-port`, `set-port`, `stats-clear`, the state file
// (--db) and SIGHUP's reload. Members of app::Switch (app/switch.h); design:
// docs/architecture.md, "Ports at run time".
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "app/json_views.h"
#include "app/state_db.h"
#include "app/switch.h"
#include "dp/flush.h"
#include "util/log.h"
#include "util/text.h"
#include "util/unix_socket.h"

namespace vl::app {

namespace {

constexpr std::string_view kExtId = "external-id:";
/// Bounds on a port's metadata (the control socket is untrusted): keys, and bytes of each.
constexpr size_t kMaxExternalIds = 64;
constexpr size_t kMaxIdKeyLen = 256;
constexpr size_t kMaxIdValueLen = 4096;

bool split_kv(const std::string& s, std::string* k, std::string* v) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *k = s.substr(0, eq);
  *v = s.substr(eq + 1);
  return true;
}

/// A vhost-user socket file's permissions and owner (set-port changes them in place).
bool access_key(const std::string& k) {
  return k == "socket_mode" || k == "socket_owner" || k == "socket_group";
}

/// Settings a running port takes without a restart (the others reopen it in its slot).
bool live_key(const std::string& k) { return k == "mac_limit" || access_key(k); }

/// Everything of a port's configuration that a restart would change, as one string (two
/// configurations open the same port when these are equal).
std::string settings_key(const port::PortConfig& c) {
  std::string t;
  for (uint16_t v : c.trunks) t += fmt::format("{},", v);
  return fmt::format("{}|{}|{}|{}|{}|{:o}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", static_cast<int>(c.type),
                     static_cast<int>(c.mode), c.path, c.name, c.mtu, c.socket_mode, c.socket_owner,
                     c.socket_group, c.mrg_rxbuf, c.offloads, c.max_queues, c.tx_retry_us,
                     c.completion_coalesce_us, c.max_guest_memory, c.vlan, t, c.native_vlan,
                     c.queue_size, c.queues, port_security_text(c.port_security));
}

bool name_ok(const std::string& n, std::string* err) { return port_name_ok(n, err); }

/// No control characters (a newline would forge a line of the switch's log, which prints
/// these): external ids, and the target of a port added at run time.
bool printable_text(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char ch) {
    return static_cast<unsigned char>(ch) < ' ' || ch == 0x7f;
  });
}

/// How many external ids a port with `have` has after set-port sets `set` (an empty value
/// removes a key: that makes room, and removing a key it lacks adds none).
size_t ids_after(const std::map<std::string, std::string>& have,
                 const std::map<std::string, std::string>& set) {
  size_t n = have.size();
  for (const auto& [k, v] : set) {
    const bool has = have.count(k) != 0;
    if (v.empty() && has) --n;
    else if (!v.empty() && !has) ++n;
  }
  return n;
}

/// A set-port's KEY=VALUE settings into the port's record (external-id:KEY too). A removed
/// id leaves no record behind: else every removal of a new key grew the record (and the
/// state file) for good, past the bound on external ids.
void record_settings(std::vector<std::string>* settings, const std::vector<std::string>& kv) {
  for (const std::string& s : kv) {
    std::string k, v;
    if (!split_kv(s, &k, &v)) continue;
    if (k.rfind(kExtId, 0) == 0 && v.empty()) {
      std::erase_if(*settings, [&](const std::string& x) { return x.rfind(k + "=", 0) == 0; });
      continue;
    }
    put_setting(settings, k, v);
  }
}

/// A state file's external ids of one port within the bounds of set-port ("" if they are).
std::string saved_ids_error(const std::map<std::string, std::string>& ids) {
  if (ids.size() > kMaxExternalIds)
    return fmt::format("{} external ids, at most {}", ids.size(), kMaxExternalIds);
  for (const auto& [k, v] : ids) {
    if (k.empty() || k.size() > kMaxIdKeyLen || v.size() > kMaxIdValueLen || !printable_text(k) ||
        !printable_text(v))
      return fmt::format("external id '{}': keys of 1 to {} bytes, values up to {}, no control "
                         "characters", utf8_prefix(k, 64), kMaxIdKeyLen, kMaxIdValueLen);
  }
  return "";
}

/// What a run-time vhost-user port's path must be, checked before anything opens (the
/// request's fault: a usage error): absolute (the switch's working directory is not the
/// client's), short enough for a socket address, and nothing but a socket where it exists.
bool socket_path_ok(const port::PortConfig& pc, std::string* err) {
  if (pc.type != port::PortType::kVhostUser) return true;
  if (pc.path.empty() || pc.path[0] != '/') {
    *err = fmt::format("port {}: socket path '{}' is not absolute", pc.name, pc.path);
    return false;
  }
  sockaddr_un a;
  if (!make_unix_addr(pc.path, &a, err)) return false;
  struct stat st;
  if (pc.mode == port::SocketMode::kServer && lstat(pc.path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    *err = fmt::format("port {}: {} exists and is not a socket", pc.name, pc.path);
    return false;
  }
  return true;
}

/// The port in slot i is part of a direct link or a tunnel: it cannot reopen in its slot
/// (its peer or tunnels hold on to it), only be deleted and added again.
bool pinned(const port::Port* p, const LinkManager& links, uint32_t i) {
  const auto* u = dynamic_cast<const port::UplinkPort*>(p);
  return (u && (u->is_underlay() || u->underlay())) || links.role(i)[0];
}

}  // namespace

bool Switch::parse_edit(const std::vector<std::string>& settings, PortEdit* e, std::string* err) const {
  for (const std::string& s : settings) {
    std::string k, v;
    if (s.rfind(kExtId, 0) == 0) {
      if (!split_kv(s.substr(kExtId.size()), &k, &v)) {
        *err = fmt::format("'{}': expected external-id:KEY=VALUE", s);
        return false;
      }
      if (!printable_text(k) || !printable_text(v)) {
        *err = fmt::format("external-id '{}': no control characters", utf8_prefix(k, 64));
        return false;
      }
      if (k.size() > kMaxIdKeyLen || v.size() > kMaxIdValueLen) {
        *err = fmt::format("external-id '{}': keys up to {} bytes, values up to {}", utf8_prefix(k, 64),
                           kMaxIdKeyLen, kMaxIdValueLen);
        return false;
      }
      e->set_ids[k] = v;
      continue;
    }
    if (!split_kv(s, &k, &v)) {
      *err = fmt::format("'{}': expected KEY=VALUE ({}, flush, external-id:KEY)", s, kPortSettingKeys);
      return false;
    }
    if (k == "flush") {
      if (v != "default" && !dp::parse_flush_policy(v, err)) return false;
      e->flush = v;
      continue;
    }
    if (!set_port_setting(&e->cfg, k, v, err)) return false;
    e->keys.push_back(k);
  }
  if (e->cfg.vlan && !e->cfg.trunks.empty()) {
    *err = fmt::format("port {}: vlan (an access port) and trunks (a trunk) exclude each other", e->cfg.name);
    return false;
  }
  return true;
}

SwitchConfig Switch::live_config() const {
  SwitchConfig c = cfg_;
  c.ports.clear();
  c.port_flush.clear();
  c.links = links_.pairs();
  for (const auto& p : ports_)
    if (p) c.ports.push_back(p->config());
  return c;
}

bool Switch::open_port(uint32_t i, const port::PortConfig& pc, std::string* err) {
  std::unique_ptr<port::Port> p = make_port(i, pc);
  if (cfg_.forward == dp::ForwardMode::kXconnect) p->set_rx_writer_rotation(i ^ 1);
  // The slot is vacant: no PMD thread reads its VLAN settings or delivers to it.
  tables_.vlan[i] = dp::PortVlan::from(pc.vlan, pc.trunks, pc.native_vlan);
  set_source_guard(i, pc);
  fdb_.set_port_limit(i, pc.mac_limit);
  fdb_.flush_port(i);
  // The counters the slot's last port left in the PMD threads show as 0 from here on.
  take_counter_base(view(), i, &base_);
  pmds_->clear_load(i);
  port::UplinkPort* under = nullptr;
  auto* self = dynamic_cast<port::UplinkPort*>(p.get());
  if (pc.type == port::PortType::kVxlan) {
    const auto u = port_index(pc.vxlan.uplink);  // (validated)
    under = u ? dynamic_cast<port::UplinkPort*>(ports_[*u].get()) : nullptr;
    if (!under) {
      *err = fmt::format("port {}: uplink '{}' is not an uplink port", pc.name, pc.vxlan.uplink);
      return false;
    }
    // The uplink becomes an underlay: it switches nothing else from now on.
    tables_.underlays.fetch_or(uint64_t{1} << *u);
    fdb_.flush_port(*u);
    under->attach_tunnel_live(self);
  }
  if (i >= ports_.size()) ports_.resize(i + 1);
  ports_[i] = std::move(p);
  tables_.ports[i].store(ports_[i].get());
  if (tables_.nports.load() <= i) tables_.nports.store(i + 1);  // before start: its rxqs count
  if (!ports_[i]->start(err)) {
    if (under) {
      under->detach_tunnel(self);
      if (!under->is_underlay()) tables_.underlays.fetch_and(~(uint64_t{1} << under->id()));
    }
    ports_[i]->stop();
    tables_.ports[i].store(&vacant_);
    pmds_->ports_changed();
    pmds_->wait_quiescent();
    ports_[i].reset();
    return false;
  }
  watch_port(i);
  return true;
}

void Switch::remove_port(uint32_t i) {
  if (watched_fd_[i] >= 0) {
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, watched_fd_[i], nullptr);
    watched_fd_[i] = -1;
  }
  auto* self = dynamic_cast<port::UplinkPort*>(ports_[i].get());
  if (self && self->underlay()) {
    // Off its underlay first: once this returns no PMD thread decapsulates into it.
    auto* under = const_cast<port::UplinkPort*>(self->underlay());
    under->detach_tunnel(self);
    if (!under->is_underlay()) tables_.underlays.fetch_and(~(uint64_t{1} << under->id()));
  }
  // Out of the datapath: the connection closed (rings stopped, memory unmapped), the socket
  // file removed, the device closed; then the slot is vacant and, once every PMD thread has
  // passed a quiescent point, nothing refers to the port object.
  ports_[i]->stop();
  fdb_.flush_port(i);
  tables_.ports[i].store(&vacant_);
  pmds_->ports_changed();
  pmds_->wait_quiescent();
  ports_[i].reset();
  fdb_.flush_port(i);
  tables_.vlan[i] = dp::PortVlan{};
  fdb_.set_port_limit(i, 0);
  std::string e;
  tables_.set_flush(i, *dp::parse_flush_policy(flush_all_.empty() ? cfg_.flush : flush_all_, &e));
  external_ids_[i].clear();
  settings_[i].clear();
  runtime_[i] = false;
}

bool Switch::add_port(const std::string& name, const std::string& type, const std::string& arg,
                      const std::vector<std::string>& settings, bool may_exist, control::Json* out,
                      std::string* err, bool* usage) {
  *usage = true;
  if (!name_ok(name, err)) return false;
  auto pc = parse_port_spec(name + "=" + type + ":" + arg, err);
  if (!pc) return false;
  if (const auto i = port_index(name)) {
    const port::PortConfig& have = ports_[*i]->config();
    if (may_exist && have.type == pc->type && have.mode == pc->mode && have.path == pc->path) {
      *out = {{"port", name}, {"id", *i}, {"created", false}, {"state", ports_[*i]->state()}};
      return true;
    }
    *err = may_exist ? fmt::format("port '{}' exists as {} {}", name,
                                   port::port_type_name(have.type, have.mode), have.path)
                     : fmt::format("port '{}' exists (--may-exist accepts it as it is)", name);
    return false;
  }
  for (const auto& p : ports_) {  // a socket path, or an interface or device, is one port's
    if (!p || p->config().path != pc->path ||
        (p->config().type == port::PortType::kVhostUser) != (pc->type == port::PortType::kVhostUser))
      continue;
    *err = fmt::format("{} '{}' is port '{}''s", pc->type == port::PortType::kVhostUser ? "socket path" : "target",
                       pc->path, p->name());
    return false;
  }
  if (!printable_text(arg)) {
    *err = fmt::format("port {}: its target has control characters", name);
    return false;
  }
  if (!socket_path_ok(*pc, err)) return false;
  PortEdit e;
  e.cfg = *pc;
  if (!parse_edit(settings, &e, err)) return false;
  if (e.set_ids.size() > kMaxExternalIds) {
    *err = fmt::format("at most {} external ids per port", kMaxExternalIds);
    return false;
  }
  SwitchConfig one = cfg_;  // the switch-wide defaults (socket mode, owner, ...) it has not set
  one.ports = {e.cfg};
  apply_port_defaults(&one);
  e.cfg = one.ports[0];
  SwitchConfig cand = live_config();
  cand.ports.push_back(e.cfg);
  if (!validate(cand, err, /*at_start=*/false)) return false;
  if ((e.cfg.vlan || !e.cfg.trunks.empty()) && !tables_.vlans) {
    *err = fmt::format("port {}: VLAN settings need a switch started with VLANs (--vlans, TOML "
                       "vlans = true, or some port of its configuration with vlan or trunks)", name);
    return false;
  }
  uint32_t slot = 0;
  while (slot < ports_.size() && ports_[slot]) ++slot;
  if (slot >= port::kMaxPorts) {
    *err = fmt::format("the switch has {} ports, its most", port::kMaxPorts);
    return false;
  }
  *usage = false;
  if (!open_port(slot, e.cfg, err)) return false;
  for (const auto& [k, v] : e.set_ids)
    if (!v.empty()) external_ids_[slot][k] = v;
  if (e.flush && *e.flush != "default") tables_.set_flush(slot, *dp::parse_flush_policy(*e.flush, err));
  runtime_[slot] = true;
  settings_[slot] = settings;
  std::erase(deleted_, name);
  save_state();
  spdlog::info("port {}: added at run time ({} {}, slot {})", name, type, arg, slot);
  *out = {{"port", name}, {"id", slot}, {"created", true}, {"state", ports_[slot]->state()}};
  return true;
}

bool Switch::del_port(const std::string& name, bool if_exists, control::Json* out, std::string* err,
                      bool* usage, bool by_reload) {
  *usage = true;
  const auto i = port_index(name);
  if (!i) {
    if (if_exists) {
      *out = {{"port", name}, {"deleted", false}};
      return true;
    }
    *err = fmt::format("no port named '{}' (--if-exists accepts that)", name);
    return false;
  }
  const auto* u = dynamic_cast<const port::UplinkPort*>(ports_[*i].get());
  if (u && u->is_underlay()) {
    std::string t;
    for (const auto& n : u->tunnel_names()) t += (t.empty() ? "" : ", ") + n;
    *err = fmt::format("port '{}' is the underlay of {}: delete them first", name, t);
    return false;
  }
  *usage = false;
  if (!links_.drop_port(*i, err)) return false;
  observe_port_gone(*i);
  remove_port(*i);
  const bool in_config = !by_reload && std::any_of(cfg_.ports.begin(), cfg_.ports.end(),
                                                   [&](const port::PortConfig& c) { return c.name == name; });
  if (in_config && std::find(deleted_.begin(), deleted_.end(), name) == deleted_.end())
    deleted_.push_back(name);
  save_state();
  if (by_reload)
    spdlog::info("port {}: deleted (the configuration read again no longer names it)", name);
  else
    spdlog::info("port {}: deleted at run time{}", name,
                 in_config ? " (the config names it: a restart brings it back)" : "");
  *out = {{"port", name}, {"deleted", true}};
  return true;
}

bool Switch::reopen_port(uint32_t i, const port::PortConfig& next, const port::PortConfig& old,
                         std::string* err) {
  // The port reopens in its slot with its records: its front-end sees the connection
  // closed and reconnects (a client-mode port reconnects itself).
  // (remove_port() gives the slot the switch-wide flush policy: the port's own comes back.)
  const auto ids_kept = external_ids_[i];
  const auto settings_kept = settings_[i];
  const bool rt = runtime_[i];
  const dp::FlushPolicy flush_kept = tables_.flush_policy(i);
  remove_port(i);
  std::string why, again;
  const bool opened = open_port(i, next, &why);
  const bool back = opened || open_port(i, old, &again);
  if (back) {
    external_ids_[i] = ids_kept;
    settings_[i] = settings_kept;
    runtime_[i] = rt;
    tables_.set_flush(i, flush_kept);
  }
  if (opened) return true;
  *err = back ? fmt::format("port {}: {} (it is as it was)", old.name, why)
              : fmt::format("port {}: {}; it could not reopen as it was either ({}): it is deleted",
                            old.name, why, again);
  if (!back) {
    // Deleted as del-port deletes: its (switched) link and the mirrors to and from its slot
    // go too, or the next port in the slot would inherit them (a direct or quarantined
    // link pins its ports: they are never reopened). remove_port() cleared its records.
    std::string unused;
    links_.drop_port(i, &unused);
    observe_port_gone(i);
    spdlog::error("{}", *err);
    save_state();
  }
  return false;
}

bool Switch::set_port(const std::string& name, const std::vector<std::string>& kv, control::Json* out,
                      std::string* err, bool* usage) {
  *usage = true;
  const auto i = port_index(name);
  if (!i) {
    *err = fmt::format("no port named '{}'", name);
    return false;
  }
  const port::PortConfig old = ports_[*i]->config();
  PortEdit e;
  e.cfg = old;
  if (!parse_edit(kv, &e, err)) return false;
  if (ids_after(external_ids_[*i], e.set_ids) > kMaxExternalIds) {
    *err = fmt::format("at most {} external ids per port", kMaxExternalIds);
    return false;
  }
  SwitchConfig cand = live_config();
  for (auto& c : cand.ports)
    if (c.name == name) c = e.cfg;
  if (!validate(cand, err, /*at_start=*/false)) return false;
  if ((e.cfg.vlan || !e.cfg.trunks.empty()) && !tables_.vlans) {
    *err = fmt::format("port {}: VLAN settings need a switch started with VLANs (--vlans)", name);
    return false;
  }
  const bool restart = std::any_of(e.keys.begin(), e.keys.end(), [](const std::string& k) { return !live_key(k); }) &&
                       settings_key(e.cfg) != settings_key(old);
  if (restart && pinned(ports_[*i].get(), links_, *i)) {
    *err = fmt::format("port '{}' is in a direct link or a tunnel: those settings need it deleted "
                       "and added again", name);
    return false;
  }
  const bool access = std::any_of(e.keys.begin(), e.keys.end(), access_key);
  auto* vp = dynamic_cast<port::VhostPort*>(ports_[*i].get());
  if (access && (!vp || old.mode != port::SocketMode::kServer)) {
    *err = fmt::format("port '{}': socket_mode, socket_owner and socket_group are settings of a "
                       "vhost-user port that listens (a client port's socket is its peer's)", name);
    return false;
  }
  uint32_t id;
  for (const auto& [who, group] : {std::pair{&e.cfg.socket_owner, false}, std::pair{&e.cfg.socket_group, true}}) {
    if (access && !who->empty() && !resolve_id(*who, group, &id)) {
      *err = fmt::format("port {}: unknown socket {} '{}'", name, group ? "group" : "owner", *who);
      return false;
    }
  }
  *usage = false;
  // A socket's permissions change in place (its front-end stays connected); first, so
  // that a failure leaves everything as it was.
  if (access && !restart &&
      !vp->set_socket_access(e.cfg.socket_mode, e.cfg.socket_owner, e.cfg.socket_group, err))
    return false;
  if (restart && !reopen_port(*i, e.cfg, old, err)) return false;
  if (std::find(e.keys.begin(), e.keys.end(), "mac_limit") != e.keys.end())
    fdb_.set_port_limit(*i, e.cfg.mac_limit);
  if (e.flush) {
    std::string pe;
    tables_.set_flush(*i, *dp::parse_flush_policy(*e.flush == "default" ? (flush_all_.empty() ? cfg_.flush : flush_all_)
                                                                        : *e.flush, &pe));
  }
  for (const auto& [k, v] : e.set_ids) {
    if (v.empty()) external_ids_[*i].erase(k);
    else external_ids_[*i][k] = v;
  }
  record_settings(&settings_[*i], kv);
  save_state();
  spdlog::info("port {}: set {}{}", name, fmt::join(kv, " "), restart ? " (the port reopened)" : "");
  *out = {{"port", name}, {"restarted", restart}, {"state", ports_[*i]->state()}};
  return true;
}

void Switch::clear_stats() {
  for (uint32_t i = 0; i < ports_.size(); ++i)
    if (ports_[i]) take_counter_base(view(), i, &base_);
  spdlog::info("counters cleared (ctl stats-clear)");
}

SavedState Switch::saved_state() const {
  SavedState s;
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (!ports_[i]) continue;
    const port::PortConfig& c = ports_[i]->config();
    s.ports.push_back({c.name, runtime_[i], port::port_type_name(c.type, c.mode), c.path, settings_[i],
                       external_ids_[i]});
  }
  s.links = links_.pairs();
  s.deleted = deleted_;
  s.flush = flush_all_;
  return s;
}

void Switch::save_state() {
  if (cfg_.db_path.empty()) return;
  const SavedState s = saved_state();
  std::string err;
  state_error_.clear();
  if (app::save_state(cfg_.db_path, s, &err)) return;
  spdlog::error("{}", err);
  state_error_ = err;
}

bool Switch::restore_state(std::string* err) {
  if (cfg_.db_path.empty()) return true;
  SavedState s;
  switch (load_state(cfg_.db_path, &s, err)) {
    case LoadStatus::kRefused:
      *err += " (the file is left as it is: repair it, or move it away to start without it)";
      return false;
    case LoadStatus::kMissing:
      spdlog::info("state file {}: none yet; run-time changes will be kept there", cfg_.db_path);
      return true;
    case LoadStatus::kOk:
      break;
  }
  merge_state(s, false);
  spdlog::info("state file {}: {} port record(s), {} link(s) restored", cfg_.db_path, restored_.size(),
               s.links.size());
  return true;
}

void Switch::merge_state(const SavedState& s, bool handover) {
  if (handover) {  // a port deleted at run time stays deleted (a restart brings it back)
    std::erase_if(cfg_.ports, [&](const port::PortConfig& c) {
      return std::find(s.deleted.begin(), s.deleted.end(), c.name) != s.deleted.end();
    });
    deleted_ = s.deleted;
  }
  std::set<std::string> named;
  for (const auto& c : cfg_.ports) named.insert(c.name);
  for (const SavedPort& sp : s.ports) {
    std::string why;
    PortEdit e;
    if (sp.runtime) {
      if (named.count(sp.name)) {
        spdlog::warn("state file: port {} was added at run time, and the config names it now: the "
                     "config's definition is used", sp.name);
        continue;
      }
      // The bounds of add-port hold for what comes back from the file too.
      auto pc = name_ok(sp.name, &why) ? parse_port_spec(sp.name + "=" + sp.type + ":" + sp.arg, &why)
                                       : std::nullopt;
      if (pc) e.cfg = *pc;
    } else {
      const auto c = std::find_if(cfg_.ports.begin(), cfg_.ports.end(),
                                  [&](const port::PortConfig& x) { return x.name == sp.name; });
      if (c == cfg_.ports.end()) {
        spdlog::info("state file: port {} is no longer in the config: its run-time settings go", sp.name);
        continue;
      }
      if (port::port_type_name(c->type, c->mode) != sp.type || c->path != sp.arg) {
        spdlog::info("state file: the config changed port {}'s type or target: its run-time settings go",
                     sp.name);
        continue;
      }
      e.cfg = *c;
    }
    if (why.empty()) why = saved_ids_error(sp.external_ids);
    SwitchConfig cand = cfg_;
    bool ok = why.empty() && parse_edit(sp.settings, &e, &why);
    if (ok && sp.runtime) {
      SwitchConfig one = cfg_;
      one.ports = {e.cfg};
      apply_port_defaults(&one);
      e.cfg = one.ports[0];
      cand.ports.push_back(e.cfg);
    } else if (ok) {
      for (auto& c : cand.ports)
        if (c.name == sp.name) c = e.cfg;
    }
    if (ok && e.flush && *e.flush != "default") cand.port_flush[sp.name] = *e.flush;
    if (!ok || !validate(cand, &why, /*at_start=*/false)) {
      spdlog::error("state file: port {} not restored: {}", sp.name, why);
      continue;
    }
    cfg_ = std::move(cand);
    restored_[sp.name] = {sp.runtime, sp.settings, sp.external_ids};
    named.insert(sp.name);
  }
  for (const std::string& n : handover ? std::vector<std::string>{} : s.deleted) {
    if (std::any_of(cfg_.ports.begin(), cfg_.ports.end(), [&](const port::PortConfig& c) { return c.name == n; }))
      spdlog::warn("port {}: deleted at run time, and the config names it: the config brings it back", n);
  }
  for (const auto& l : s.links) {
    if (std::find(cfg_.links.begin(), cfg_.links.end(), l) != cfg_.links.end()) continue;
    SwitchConfig cand = cfg_;
    cand.links.push_back(l);
    std::string why;
    if (!validate(cand, &why, false)) {
      spdlog::error("state file: link {} {} not restored: {}", l.first, l.second, why);
      continue;
    }
    cfg_ = std::move(cand);
  }
  if (!s.flush.empty()) {
    std::string why;
    if (dp::parse_flush_policy(s.flush, &why)) {
      cfg_.flush = s.flush;
      flush_all_ = s.flush;
    }
  }
}

bool Switch::apply_reload(control::Json* out, std::string* err) {
  if (!reloader_) {
    *err = "this switch cannot read its configuration again (no command line to read it from)";
    return false;
  }
  SwitchConfig nc;
  if (!reloader_(&nc, err)) return false;
  // What a running switch cannot change: said, and left as it is.
  std::vector<std::string> restart;
  auto need = [&](bool differs, const char* what) {
    if (differs) restart.push_back(what);
  };
  need(nc.forward != cfg_.forward, "forward");
  need(nc.pmd_cores != cfg_.pmd_cores, "pmd_cores");
  need(nc.pmd.mode != cfg_.pmd.mode || nc.pmd.idle_us != cfg_.pmd.idle_us ||
           nc.pmd.rxq_assign != cfg_.pmd.rxq_assign || nc.pmd.follow_writers != cfg_.pmd.follow_writers,
       "pmd options");
  need(nc.control_path != cfg_.control_path, "control");
  need(nc.burst != cfg_.burst, "burst");
  need(nc.fdb_buckets != cfg_.fdb_buckets || nc.mac_limit != cfg_.mac_limit, "MAC table size or limit");
  need(nc.max_total_guest_memory != cfg_.max_total_guest_memory, "max_total_guest_memory");
  need(nc.metrics != cfg_.metrics, "metrics");
  need(nc.vlans && !tables_.vlans, "vlans");
  reload_ports(nc, out);
  // What changes at run time: MAC aging, the flush policy of every port without its own.
  cfg_.mac_aging_s = nc.mac_aging_s;
  if (nc.flush != cfg_.flush && flush_all_.empty()) {
    std::string e;
    cfg_.flush = nc.flush;
    for (uint32_t i = 0; i < port::kMaxPorts; ++i) {
      const bool own = i < ports_.size() && ports_[i] &&
                       (nc.port_flush.count(ports_[i]->name()) ||
                        std::any_of(settings_[i].begin(), settings_[i].end(),
                                    [](const std::string& s) { return s.rfind("flush=", 0) == 0; }));
      if (!own) tables_.set_flush(i, *dp::parse_flush_policy(nc.flush, &e));
    }
  }
  cfg_.port_flush = nc.port_flush;
  (*out)["needs_restart"] = restart;
  for (const auto& r : restart)
    spdlog::warn("reload: {} changed in the configuration: it takes effect at the next start", r);
  save_state();
  return true;
}

void Switch::reload_ports(const SwitchConfig& nc, control::Json* out) {
  control::Json added = control::Json::array(), removed = control::Json::array(),
                reopened = control::Json::array(), failed = control::Json::array();
  auto in = [](const SwitchConfig& c, const std::string& n) {
    return std::find_if(c.ports.begin(), c.ports.end(), [&](const port::PortConfig& x) { return x.name == n; });
  };
  // Ports the configuration no longer names (ports added at run time stay).
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (!ports_[i] || runtime_[i]) continue;
    const std::string n = ports_[i]->name();
    if (in(nc, n) != nc.ports.end()) continue;
    std::string err;
    bool usage;
    control::Json r;
    if (del_port(n, false, &r, &err, &usage, /*by_reload=*/true)) removed.push_back(n);
    else failed.push_back({{"port", n}, {"error", err}});
    std::erase(deleted_, n);
  }
  for (const port::PortConfig& c : nc.ports) {
    const auto i = port_index(c.name);
    std::string err;
    if (!i) {
      if (std::find(deleted_.begin(), deleted_.end(), c.name) != deleted_.end()) continue;  // deleted at run time
      SwitchConfig cand = live_config();
      cand.ports.push_back(c);
      uint32_t slot = 0;
      while (slot < ports_.size() && ports_[slot]) ++slot;
      if (slot >= port::kMaxPorts || !validate(cand, &err, false) || !open_port(slot, c, &err)) {
        failed.push_back({{"port", c.name}, {"error", err.empty() ? "no free slot" : err}});
        continue;
      }
      added.push_back(c.name);
      continue;
    }
    if (runtime_[*i]) continue;  // added at run time: the config's version waits for a restart
    // Its run-time settings stay on top of the configuration's.
    PortEdit e;
    e.cfg = c;
    if (!parse_edit(settings_[*i], &e, &err)) e.cfg = c;
    if (settings_key(e.cfg) == settings_key(ports_[*i]->config())) continue;
    if (pinned(ports_[*i].get(), links_, *i)) {
      // As set-port: reopening an underlay would leave its tunnels on the closed port
      // (a use after free at their next frame or deletion), a linked port its peer.
      err = fmt::format("port {} is in a direct link or a tunnel: its changed settings need it "
                        "deleted and added again (or a restart)", c.name);
      spdlog::error("reload: {}", err);
      failed.push_back({{"port", c.name}, {"error", err}});
      continue;
    }
    const port::PortConfig old = ports_[*i]->config();
    if (reopen_port(*i, e.cfg, old, &err)) {
      reopened.push_back(c.name);
    } else {
      failed.push_back({{"port", c.name}, {"error", err}});
      if (!ports_[*i]) removed.push_back(c.name);  // it could not come back as it was either
    }
  }
  cfg_.ports = nc.ports;
  (*out)["added"] = added;
  (*out)["removed"] = removed;
  (*out)["reopened"] = reopened;
  (*out)["failed"] = failed;
  spdlog::info("reload: {} port(s) added, {} removed, {} reopened, {} failed", added.size(),
               removed.size(), reopened.size(), failed.size());
}

}  // namespace vl::app
