#pragma once
// `virtlink ctl trace PORT HEX|--pcap FILE` on the client's side (cli/ctl_trace.cpp): the
// request's words (the frame read from a capture by ctl itself, with libpcap: the switch
// never opens a client's path) and the reply's text, like OVS's ofproto/trace.
#include <string>
#include <vector>

#include "control/control_server.h"

namespace vl::cli {

/// The words of a `trace` request from ctl's: `words` as given ([PORT, HEX] or [PORT, HEX,
/// LEN]; with `pcap`, [PORT] and the capture's first frame appended), the frame re-encoded
/// as plain hex, a frame above dp::kTraceWholeBytes sent as its first dp::kTraceHeadBytes
/// and its length (so that it fits a request line). Returns 0 when `*words` is ready, else
/// the exit status with the message on stderr (2: a usage error; 1: the file cannot be read).
int trace_words(const std::string& pcap, std::vector<std::string>* words);

/// The reply of `trace` as text.
void print_trace(const control::Json& r);

}  // namespace vl::cli
