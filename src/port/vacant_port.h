#pragma once
// What a slot of the switch's port table holds while no port is in it (a port deleted at
// run time, or a slot not used yet): a port that is never active, so the datapath skips it
// like a port whose front-end is away (docs/architecture.md, "Ports at run time").
#include <string>

#include "port/port.h"

namespace vl::port {

class VacantPort final : public Port {
 public:
  VacantPort() : Port(kMaxPorts, "") {}
  const char* state() const override { return "down"; }
  const char* type_name() const override { return "none"; }
  const std::string& target() const override { return name_; }
  bool connected() const override { return false; }
  const PortConfig& config() const override { return cfg_; }
  bool start(std::string*) override { return true; }
  void stop() override {}
  void move_rx_writers(uint32_t) override {}

 private:
  PortConfig cfg_;
};

}  // namespace vl::port
