// MappedFile::contains / release: releasing the pages of a range drops
// nothing a later read needs (the private, never written mapping faults the
// file's bytes back in), and ranges outside the mapping are ignored.
#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace specstack {
namespace {

TEST(MappedFile, ReleasedPagesReadBackTheFile) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<char> bytes(page * 5 + 123);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i * 131 + 7);
  const std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok()) << file.message();
  std::remove(path.c_str());  // the mapping keeps the pages
  const MappedFile& m = **file;
  const uint8_t* d = m.data();
  EXPECT_TRUE(m.contains(d, m.size()));
  EXPECT_TRUE(m.contains(d + 10, page));
  EXPECT_FALSE(m.contains(d + 1, m.size()));
  EXPECT_FALSE(m.contains(d - 1, 1));
  EXPECT_FALSE(m.contains(d, m.size() + 1));
  EXPECT_FALSE(m.contains(bytes.data(), 1));
  // Touch everything, release a range that covers 3 whole pages and parts
  // of two more, and one outside the mapping; every byte still reads back.
  long sum = 0;
  for (size_t i = 0; i < m.size(); ++i) sum += d[i];
  EXPECT_NE(sum, 0);
  m.release(d + page / 2, page * 4);
  m.release(bytes.data(), bytes.size());  // not this mapping's: ignored
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(char(d[i]), bytes[i]) << i;
}

}  // namespace
}  // namespace specstack
