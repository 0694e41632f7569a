#include "core/base/lazy_map.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ckptfs {
namespace {

TEST(LazyMapTest, AMapNeverWrittenIsEmptyEverywhere) {
  LazyMap<std::string, int> map;
  const LazyMap<std::string, int>& view = map;
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.count("a"), 0u);
  EXPECT_EQ(map.find("a"), map.end());
  EXPECT_EQ(view.find("a"), view.end());
  EXPECT_EQ(map.begin(), map.end());
  EXPECT_EQ(map.erase("a"), 0u);
  map.erase_if([](const auto&) { return true; });
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(sizeof(map), sizeof(void*));
}

TEST(LazyMapTest, EntriesAreFoundInOrderAndErased) {
  LazyMap<std::string, int> map;
  map["b"] = 2;
  map["a"] = 1;
  map["c"] = 3;
  std::vector<std::string> keys;
  for (const auto& [key, value] : map) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_NE(map.find("b"), map.end());
  EXPECT_EQ(map.find("b")->second, 2);
  map.erase(map.find("b"));
  EXPECT_EQ(map.erase("c"), 1u);
  map.erase_if([](const auto& entry) { return entry.second == 1; });
  EXPECT_TRUE(map.empty());
  map["d"] = 4;
  map.clear();
  EXPECT_EQ(map.find("d"), map.end());
}

TEST(LazyMapTest, ACopyIsIndependentOfItsOriginal) {
  LazyMap<std::string, int> map;
  map["a"] = 1;
  LazyMap<std::string, int> copy = map;
  copy["b"] = 2;
  map.erase("a");
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_TRUE(map.empty());
  LazyMap<std::string, int> none;
  copy = none;
  EXPECT_TRUE(copy.empty());
}

}  // namespace
}  // namespace ckptfs
