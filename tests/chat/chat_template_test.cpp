#include "chat/chat_template.h"

#include <gtest/gtest.h>

namespace specstack {
namespace {

TEST(ChatTemplate, Smoke) {
  auto t = ChatTemplate::parse("Hello {{ name }}!");
  ASSERT_TRUE(t.ok()) << t.message();
  auto out = t->render({{"name", "world"}});
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, "Hello world!");
}

}  // namespace
}  // namespace specstack
