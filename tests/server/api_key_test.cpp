// The API key check without HTTP: same_secret compares whole keys of any
// length, bearer_credentials takes the scheme in any letter case, and
// check_api_key says which of missing / not Bearer / wrong key it was.
#include "server/api_key.h"

#include <gtest/gtest.h>

#include <string>

namespace specstack {
namespace {

TEST(ApiKey, SameSecretComparesWholeKeysOfAnyLength) {
  const std::string key = "sekrit-key";
  EXPECT_TRUE(same_secret("sekrit-key", key));
  for (const char* other : {"", "s", "sekrit-ke", "sekrit-kez", "Sekrit-key", "sekrit-key2",
                            "sekrit-keysekrit-key", "ssssssssssssssssssss"}) {
    EXPECT_FALSE(same_secret(other, key)) << other;
  }
  // Past the key's end the key's first byte is compared: a longer key made
  // of it must still fail on the length.
  EXPECT_FALSE(same_secret("aaaa", "a"));
  EXPECT_TRUE(same_secret("a", "a"));
  EXPECT_FALSE(same_secret(std::string("sekrit-key\0", 11), key));
}

TEST(ApiKey, BearerSchemeInAnyCase) {
  EXPECT_EQ(bearer_credentials("Bearer abc"), std::optional<std::string_view>("abc"));
  EXPECT_EQ(bearer_credentials("bearer abc"), std::optional<std::string_view>("abc"));
  EXPECT_EQ(bearer_credentials("BEARER abc"), std::optional<std::string_view>("abc"));
  EXPECT_EQ(bearer_credentials("Bearer   abc"), std::optional<std::string_view>("abc"));
  for (const char* bad : {"", "Bearer", "Bearer ", "Bearerabc", "Basic abc", "Bearer\tabc"}) {
    EXPECT_FALSE(bearer_credentials(bad)) << bad;
  }
}

TEST(ApiKey, CheckSaysWhatWasWrong) {
  EXPECT_FALSE(check_api_key("Bearer k", "k"));
  auto missing = check_api_key("", "k");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_NE(missing->message.find("Missing API key"), std::string::npos);
  auto scheme = check_api_key("Basic k", "k");
  ASSERT_TRUE(scheme);
  EXPECT_NE(scheme->message.find("Bearer scheme"), std::string::npos);
  auto wrong = check_api_key("Bearer x", "k");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->code, std::optional<std::string>("invalid_api_key"));
  EXPECT_NE(wrong->message.find("Incorrect API key"), std::string::npos);
}

}  // namespace
}  // namespace specstack
