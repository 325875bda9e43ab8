// The table-driven CRC32C that crc32c() falls back to on CPUs without SSE4.2; exposed so the tests
// can check it against the hardware path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace capplan::rt {

// Same contract as crc32c() in runtime/checkpoint.h.
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace capplan::rt
