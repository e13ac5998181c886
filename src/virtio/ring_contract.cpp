// Both layouts of each side keep the ring contract (ring_contract.h).
#include "virtio/ring_contract.h"

#include "virtio/device_queue.h"
#include "virtio/driver_packed_queue.h"
#include "virtio/driver_queue.h"
#include "virtio/packed_device_queue.h"

namespace vl::virtio {
static_assert(DeviceRing<DeviceQueue>);
static_assert(DeviceRing<PackedDeviceQueue>);
static_assert(DriverRing<DriverQueue>);
static_assert(DriverRing<PackedDriverQueue>);
}  // namespace vl::virtio
