#pragma once
// The byte-stream reader every fuzz target decodes its input with: little-endian integers
// taken from the front, zeros once the input is used up (so every input decodes to some
// program and short inputs end early). fuzz/make_seeds.py writes seeds in the same format.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vl::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  bool empty() const { return left_ == 0; }
  size_t left() const { return left_; }

  template <typename T>
  T get() {
    T v{};
    const size_t n = left_ < sizeof(T) ? left_ : sizeof(T);
    std::memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }
  uint8_t u8() { return get<uint8_t>(); }
  uint16_t u16() { return get<uint16_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }

  /// Up to `n` bytes from the front (fewer if the input ends); returns how many.
  size_t bytes(void* dst, size_t n) {
    if (n > left_) n = left_;
    std::memcpy(dst, p_, n);
    p_ += n;
    left_ -= n;
    return n;
  }
  /// A pointer to up to `n` bytes, consumed.
  const uint8_t* take(size_t* n) {
    if (*n > left_) *n = left_;
    const uint8_t* r = p_;
    p_ += *n;
    left_ -= *n;
    return r;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace vl::fuzz
