// Fuzz target: token shard files (shard_read_header, then shard_read with a vocabulary): the
// input is written as a .bin file and read back through the runtime's reader.
#include "fuzz_check.h"
#include "io/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string t = capplan::fuzz::text_of(data, size);
  const std::string path = capplan::fuzz::write_scratch("shard_000000.bin", t);
  capplan::Diagnostics d;
  capplan::rt::ShardHeader h;
  const bool ok = capplan::rt::shard_read_header(path, &h, &d);
  if (ok == d.has_errors()) capplan::fuzz::fail("shard", "result and errors disagree", t);
  if (ok && (h.num_tokens < 0 || 1024 + 2 * h.num_tokens != int64_t(size)))
    capplan::fuzz::fail("shard", "header accepted with a size that does not match", t);
  capplan::fuzz::check_diagnostics(d, "shard", t);
  if (ok) {
    std::vector<uint16_t> tokens;
    capplan::Diagnostics d2;
    const bool read = capplan::rt::shard_read(path, 97, &tokens, &d2);
    if (read == d2.has_errors()) capplan::fuzz::fail("shard", "read and errors disagree", t);
    if (read)
      for (uint16_t tok : tokens)
        if (tok >= 97) capplan::fuzz::fail("shard", "token over the vocabulary accepted", t);
  }
  return 0;
}
