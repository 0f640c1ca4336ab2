// ModelInstanceOptions::on_progress reaches the weight loader, for both real
// and dummy weights.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/model_instance.h"
#include "test_util.h"

namespace specstack {
namespace {

TEST(ModelInstanceProgressTest, CallbackRisesMonotonicallyToTotal) {
  for (const bool dummy : {false, true}) {
    SCOPED_TRACE(dummy ? "dummy weights" : "safetensors");
    ModelInstanceOptions options;
    options.model_dir = testing::golden_model_dir("tinystories-656k");
    options.dummy_weights = dummy;
    options.kv_tokens = 64;
    std::vector<int64_t> done;
    std::vector<int64_t> totals;
    options.on_progress = [&](int64_t d, int64_t total) {
      done.push_back(d);
      totals.push_back(total);
    };
    CpuBackend backend(CpuBackendOptions{1});
    auto instance = ModelInstance::create(options, backend);
    ASSERT_TRUE(instance.ok()) << instance.message();
    const int64_t total = (*instance)->config().n_layers + 1;
    ASSERT_FALSE(done.empty());
    for (size_t i = 0; i < done.size(); ++i) {
      EXPECT_EQ(totals[i], total);
      if (i > 0) {
        EXPECT_GT(done[i], done[i - 1]);
      }
    }
    EXPECT_EQ(done.front(), 1);
    EXPECT_EQ(done.back(), total);
  }
}

}  // namespace
}  // namespace specstack
