// Both layouts of each side keep the ring contract (ring_contract.h).
#include "virtio/ring_contract.h"

#include "virtio/split_device_queue.h"
#include "virtio/packed_driver_queue.h"
#include "virtio/split_driver_queue.h"
#include "virtio/packed_device_queue.h"

namespace vl::virtio {
static_assert(DeviceRing<SplitDeviceQueue>);
static_assert(DeviceRing<PackedDeviceQueue>);
static_assert(DriverRing<SplitDriverQueue>);
static_assert(DriverRing<PackedDriverQueue>);
}  // namespace vl::virtio
