// Fuzz target: the vhost-user back-end's message handler (vhost::Backend over a real
// socketpair), fed message sequences with fds, then the datapath over whatever rings the
// messages set up.
//
// Input: a sequence of operations (fuzz/fuzz_input.h), each starting with an opcode byte:
//   0 MSG     u32 request, u32 flags, u16 payload length L, u8 size mode (0: header size =
//             L, else a u32 header size follows), L payload bytes, u8 fd count (% 10) and
//             per fd u8 kind + u32 parameter (see make_fd); one sendmsg.
//   1 RAW     u16 length, bytes: written as they are (partial headers, garbage).
//   2 RUN     u8 rounds of the datapath: TX chains popped, their frames delivered to RX
//             (split or packed rings, as negotiated).
//   3 POKE    u8 memfd, u32 offset, u16 length, bytes: the front-end writes its memory
//             (rings, descriptors, headers) between messages.
//   4 CLOSE   the front-end closes and a new one connects.
// After every message the back-end reads until it would block; a failure disconnects
// and the next operation starts on a fresh connection, as in the switch.
// Checks beyond the sanitizers: pause/resume stay balanced, a ready vring is attached,
// and at the end every fd the back-end took is closed (fd count back to the baseline).
#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_input.h"
#include "util/fd_message.h"
#include "util/log.h"
#include "vhost/backend.h"
#include "virtio/net_copy.h"
#include "virtio/virtio_defs.h"

using namespace vl;
using namespace vl::vhost;
using namespace vl::virtio;

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_vhost_backend: %s\n", what);
  std::abort();
}

int count_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) die("opendir /proc/self/fd");
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

extern uint64_t delivered;

struct Host final : DeviceHost {
  int depth = 0;
  void pause_datapath() override { ++depth; }
  void resume_datapath() override {
    if (--depth < 0) die("resume without pause");
  }
};

/// A memfd the front-end created and mapped (its "guest memory").
struct Memfd {
  int fd = -1;
  uint8_t* p = nullptr;
  size_t len = 0;
};

class Harness {
 public:
  explicit Harness() : backend_(&host_, [] {
                         BackendOptions o = BackendOptions::defaults();
                         return o;
                       }()) {
    connect();
  }
  ~Harness() {
    backend_.disconnect();
    if (host_.depth != 0) die("pause/resume unbalanced");
    if (peer_ >= 0) ::close(peer_);
    for (Memfd& m : memfds_) {
      munmap(m.p, m.len);
      ::close(m.fd);
    }
    for (int fd : extra_fds_) ::close(fd);
  }

  void connect() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) die("socketpair");
    backend_.attach(UniqueFd(sv[0]));
    if (peer_ >= 0) ::close(peer_);
    peer_ = sv[1];
  }

  void reconnect() {
    backend_.disconnect();
    if (host_.depth != 0) die("pause/resume unbalanced");
    connect();
  }

  /// Lets the back-end handle what it has been sent; drains its replies.
  void pump() {
    for (int i = 0; i < 4; ++i) {
      std::string why;
      if (!backend_.on_readable(&why)) {
        reconnect();
        break;
      }
    }
    if (host_.depth != 0) die("pause/resume unbalanced");
    char buf[8192];
    while (recv(peer_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    for (uint32_t i = 0; i < backend_.num_vrings(); ++i) {  // every queue pair
      const Vring& v = backend_.vring(i);
      if (v.ready && !(v.packed ? v.pq.attached() : v.q.attached())) die("ready vring not attached");
    }
  }

  /// Creates an fd of the kind the input asks for; returned fds stay owned by the
  /// harness (sendmsg passes copies).
  int make_fd(uint8_t kind, uint32_t param) {
    switch (kind % 8) {
      case 0: {  // a memfd of up to 1 MiB (rounded to pages), mapped here
        if (memfds_.size() >= 12) return memfds_.back().fd;
        const size_t len = ((param % (1u << 20)) + 4095) & ~size_t{4095};
        const int fd = memfd_create("fuzz-guest", MFD_CLOEXEC);
        if (fd < 0) die("memfd_create");
        if (ftruncate(fd, static_cast<off_t>(len ? len : 4096)) != 0) die("ftruncate");
        Memfd m{fd, nullptr, len ? len : 4096};
        void* p = mmap(nullptr, m.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        m.p = static_cast<uint8_t*>(p);
        memfds_.push_back(m);
        return fd;
      }
      case 1: return keep(eventfd(0, EFD_CLOEXEC | ((param & 1) ? EFD_NONBLOCK : 0)));
      case 2:
      case 3: {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) die("pipe");
        keep(p[0]);
        keep(p[1]);
        return kind % 8 == 2 ? p[0] : p[1];
      }
      case 4: return keep(open("/dev/null", O_RDWR | O_CLOEXEC));
      case 5: {  // a socket: the channel refuses it and closes the connection
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
        keep(sv[1]);
        return keep(sv[0]);
      }
      case 6:  // an earlier memfd again (one memfd as several regions)
        if (!memfds_.empty()) return memfds_[param % memfds_.size()].fd;
        return keep(eventfd(0, EFD_CLOEXEC));
      default: {  // a read-only fd of a memfd
        if (memfds_.empty()) return keep(open("/dev/null", O_RDONLY | O_CLOEXEC));
        char path[64];
        std::snprintf(path, sizeof path, "/proc/self/fd/%d", memfds_[param % memfds_.size()].fd);
        return keep(open(path, O_RDONLY | O_CLOEXEC));
      }
    }
  }

  void send_message(fuzz::Input& in) {
    MsgHeader h;
    h.request = in.u32();
    h.flags = in.u32();
    const uint32_t len = in.u16() % (kMaxPayload + 64);
    const uint8_t size_mode = in.u8();
    h.size = size_mode ? in.u32() : len;
    std::vector<uint8_t> buf(sizeof h + len);
    std::memcpy(buf.data(), &h, sizeof h);
    in.bytes(buf.data() + sizeof h, len);
    const uint32_t nfds = in.u8() % 10;
    int fds[10];
    for (uint32_t i = 0; i < nfds; ++i) {
      const uint8_t kind = in.u8();
      fds[i] = make_fd(kind, in.u32());
      if (fds[i] < 0) die("fd creation failed");
    }
    send_raw(buf.data(), buf.size(), fds, nfds);
    pump();
  }

  void send_raw(const void* data, size_t len, const int* fds, uint32_t nfds) {
    iovec iov{const_cast<void*>(data), len};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 10)];
    attach_fds(&mh, cbuf, fds, nfds);
    // The back-end may have closed its end (a refused message): EPIPE is fine.
    (void)sendmsg(peer_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void raw(fuzz::Input& in) {
    size_t n = in.u16() % 8192;
    const uint8_t* p = in.take(&n);
    send_raw(p, n, nullptr, 0);
    pump();
  }

  void poke(fuzz::Input& in) {
    const uint8_t which = in.u8();
    const uint32_t off = in.u32();
    size_t n = in.u16();
    const uint8_t* p = in.take(&n);
    if (memfds_.empty()) return;
    Memfd& m = memfds_[which % memfds_.size()];
    const size_t o = off % m.len;
    if (n > m.len - o) n = m.len - o;
    std::memcpy(m.p + o, p, n);
  }

  /// The datapath as the forwarder runs it: TX chains of this port delivered to its RX
  /// queue (through a bounce buffer: here both queues share one mapping, in the switch
  /// the sender's and the receiver's memory are different mappings).
  void run(fuzz::Input& in) {
    const uint32_t rounds = in.u8() % 8 + 1;
    Vring& txv = backend_.vring(kTxVring);
    Vring& rxv = backend_.vring(kRxVring);
    const uint32_t hdr_len = net_hdr_len(backend_.features());
    const bool mrg = has(backend_.features(), kNetFMrgRxbuf);
    for (uint32_t r = 0; r < rounds; ++r) {
      // Both rings take the layout the features chose (VIRTIO_F_RING_PACKED or not).
      const bool rx_up = rxv.ready && rxv.packed == txv.packed;
      if (txv.packed) {
        if (txv.ready) round(txv.pq, rx_up ? &rxv.pq : nullptr, hdr_len, mrg);
        else if (rx_up && !rxv.pq.broken()) rxv.pq.publish_used();
      } else {
        if (txv.ready) round(txv.q, rx_up ? &rxv.q : nullptr, hdr_len, mrg);
        else if (rx_up && !rxv.q.broken()) rxv.q.publish_used();
      }
    }
  }

  /// One pass of the datapath over a split or packed ring pair.
  template <class Q>
  void round(Q& q, Q* rq, uint32_t hdr_len, bool mrg) {
    if (!q.broken()) {
      arena_.clear();
      for (int i = 0; i < 32 && q.has_avail() && arena_.has_room_for_chain(); ++i) {
        Chain c;
        const PopStatus st = q.template pop<false>(arena_, &c);
        if (st != PopStatus::kOk) continue;
        TxFrame f;
        if (split_tx_chain(arena_, c, hdr_len, &f) && f.len <= sizeof frame_) {
          gather_copy(frame_, &arena_.segs[f.seg_begin], f.nsegs, 0, f.len);
          if (rq && !rq->broken()) {
            Segment s{frame_, f.len};
            const DeliverStatus ds = deliver_frame(*rq, scratch_, f.hdr, hdr_len, &s, 1, f.len, mrg);
            if (ds == DeliverStatus::kBadRing) rq->mark_broken();
            if (ds == DeliverStatus::kOk) ++delivered;
          }
        }
        q.push_used(c.head, 0, c.ring_descs);
      }
      q.publish_used();
      q.set_kicks(true);
    }
    if (rq && !rq->broken()) rq->publish_used();
  }

 private:
  int keep(int fd) {
    if (fd < 0) die("fd creation failed");
    extra_fds_.push_back(fd);
    return fd;
  }

  Host host_;
  Backend backend_;
  int peer_ = -1;
  std::vector<Memfd> memfds_;
  std::vector<int> extra_fds_;
  SegmentArena arena_;
  SegmentArena scratch_;
  uint8_t frame_[kMaxFrameLen];
};

int baseline_fds = -1;
uint64_t delivered = 0;  // frames through TX -> RX (VL_FUZZ_VERBOSE=1 prints it per input)

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Per input: libFuzzer itself opens and closes files between inputs.
  baseline_fds = count_fds();
  {
    auto h = std::make_unique<Harness>();
    fuzz::Input in(data, size);
    for (int ops = 0; !in.empty() && ops < 256; ++ops) {
      switch (in.u8() % 5) {
        case 0: h->send_message(in); break;
        case 1: h->raw(in); break;
        case 2: h->run(in); break;
        case 3: h->poke(in); break;
        default: h->reconnect(); break;
      }
    }
  }
  if (const int n = count_fds(); n != baseline_fds) {
    std::fprintf(stderr, "fuzz_vhost_backend: %d fds before the input, %d after\n", baseline_fds, n);
    die("fd leak: the back-end kept an fd after disconnect");
  }
  if (getenv("VL_FUZZ_VERBOSE")) std::fprintf(stderr, "frames delivered so far: %lu\n", delivered);
  return 0;
}
