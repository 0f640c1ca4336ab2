// --device cuda where it cannot run: a CPU-only build, or no GPU. Either way
// one clear error line and exit code 1, never a crash or a silent CPU run.
#include <gtest/gtest.h>

#include "test_util.h"

namespace specstack {
namespace {

TEST(CliDevice, CudaWithoutBackendOrGpuIsAClearError) {
  const auto r =
      testing::run_specstack("generate --model " + testing::golden_model_dir("tinystories-656k") +
                             " --prompt Once -n 2 --device cuda");
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU is present: --device cuda ran";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const bool no_backend = r.err.find("this build has no CUDA backend") != std::string::npos;
  const bool no_gpu = r.err.find("no usable CUDA device") != std::string::npos;
  EXPECT_TRUE(no_backend || no_gpu) << r.err;
  EXPECT_EQ(r.err.rfind("specstack: error: --device cuda: ", 0), 0u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliDevice, UnknownDeviceIsRejected) {
  const auto r =
      testing::run_specstack("generate --model " + testing::golden_model_dir("tinystories-656k") +
                             " --prompt Once -n 2 --device tpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--device"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace specstack
